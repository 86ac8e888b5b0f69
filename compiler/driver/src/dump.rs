//! Text forms of the schedule and the memory plan, for `--dump-after schedule|memory`.

use std::fmt::Write;
use wgslc_ir::{Graph, NodeId};
use wgslc_passes::{BufferKind, Fold, MemoryPlan, Schedule};

/// One line per kernel in dispatch order (anchor, folds, epilogue, recipe), then each boundary with its reason.
pub fn print_schedule(g: &Graph, sched: &Schedule) -> String {
    let name = |n: NodeId| g.node(n).name.clone();
    let names = |ns: &[NodeId]| ns.iter().map(|&n| name(n)).collect::<Vec<_>>().join(", ");
    let mut s = String::new();
    let _ = writeln!(s, "schedule: {} kernels, {} folded copies", sched.kernels.len(), sched.folded.len());
    for (i, k) in sched.kernels.iter().enumerate() {
        let mut line = format!("k{i:03}");
        match k.anchor {
            Some(a) => {
                let _ = write!(line, " {} {}", g.node(a).op.name(), name(a));
            }
            None => line.push_str(" elementwise"),
        }
        for f in &k.folds {
            let what = match f {
                Fold::Operand { slot, node } => format!("operand {slot}: {}", name(*node)),
                Fold::RowOperand(nodes) => format!("row operand {}", names(nodes)),
                Fold::ReadConcat(c) => format!("reads {} in place", name(*c)),
                Fold::CacheRows { operand, writes } => format!("cache rows {} ← {}", names(writes), names(operand)),
                Fold::Expand(c) => format!("expand {}", names(&f_nodes(c.conv, &c.then))),
                Fold::Depthwise(c) => format!("depthwise {}", names(&f_nodes(c.conv, &c.then))),
                Fold::RmsNorm(n) => format!("rms norm {}", name(*n)),
                Fold::ConvSum { conv, add } => format!("conv sum {} via {}", name(*conv), name(*add)),
                Fold::Attention(t) => format!("attention {} → {}", name(t.softmax), name(t.pv)),
                Fold::StoreCopy(t) => format!("store copy {}", name(*t)),
                Fold::WriteInto { concat, slot } => format!("into {} slot {slot}", name(*concat)),
                Fold::CacheWrite(n) => format!("and cache write {}", name(*n)),
                Fold::Blocks { concat, products } => format!("blocks {} into {}", names(products), name(*concat)),
            };
            let _ = write!(line, " [{what}]");
        }
        if !k.elementwise.is_empty() {
            let _ = write!(line, " then {}", names(&k.elementwise));
        }
        let r = &k.recipe;
        if let Some(t) = r.product {
            let _ = write!(line, " | tile {0}x{0}, K in {1} slice(s) of {2}, step {3}", t.tile, t.slices, t.kc, t.ks);
        }
        if let Some(b) = &r.batch {
            let _ = write!(line, " | batch over {b:?}");
        }
        if let Some(t) = r.expand {
            let _ = write!(line, " | expand tile {}x{}, {} channels a step", t.ty, t.tx, t.ec);
        }
        if let Some(p) = &r.store {
            let _ = write!(line, " | stored at {} + {} index terms", p.offset, p.terms.len());
        }
        let _ = writeln!(s, "{line}");
    }
    for b in &sched.boundaries {
        let _ = writeln!(
            s,
            "boundary {} → {} ({}): {}",
            name(b.producer),
            name(b.consumer),
            g.value(b.value).name,
            b.reason
        );
    }
    s
}

fn f_nodes(conv: NodeId, then: &[NodeId]) -> Vec<NodeId> {
    std::iter::once(conv).chain(then.iter().copied()).collect()
}

/// The buffers (kind, bytes), then where each value lives, in buffer and offset order, and the totals.
pub fn print_memory(g: &Graph, mem: &MemoryPlan) -> String {
    let mut s = String::new();
    let st = &mem.stats;
    let _ = writeln!(
        s,
        "memory: {} buffers; intermediates {} B planned (lower bound {} B, one buffer each {} B), weights {} B, io {} B",
        mem.buffers.len(),
        st.planned_bytes,
        st.lower_bound_bytes,
        st.naive_bytes,
        st.weights_bytes,
        st.io_bytes
    );
    for (i, b) in mem.buffers.iter().enumerate() {
        let kind = match b.kind {
            BufferKind::Input(j) => format!("input {j}"),
            BufferKind::Output(j) => format!("output {j}"),
            BufferKind::Weights => "weights".into(),
            BufferKind::Intermediate => "intermediates".into(),
        };
        let _ = writeln!(s, "buffer {i} {}: {} B, {kind}", b.name, b.size);
    }
    let mut slots: Vec<_> = mem.slots.iter().filter(|(v, _)| g.value(**v).data.is_none()).collect();
    slots.sort_by_key(|(v, slot)| (slot.buffer, slot.offset, g.value(**v).name.clone()));
    for (v, slot) in slots {
        let in_place =
            mem.in_place.get(v).map(|src| format!(" (in place of {})", g.value(*src).name)).unwrap_or_default();
        let _ = writeln!(s, "  {} @ {}+{} ({} B){in_place}", g.value(*v).name, slot.buffer, slot.offset, slot.size);
    }
    let _ = writeln!(s, "weights: {} constants packed", mem.weights.len());
    s
}
