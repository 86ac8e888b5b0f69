//! Memory planning: where every value lives on the GPU.

use crate::lower::storage_root;
use crate::{PassError, Schedule};
use std::collections::HashMap;
use wgslc_ir::{Graph, ValueId};

/// WebGPU's storage buffer offset alignment (minStorageBufferOffsetAlignment's default).
pub const ALIGN: u64 = 256;

/// What a buffer holds, which decides who writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// Graph input `i`: written by the caller before each run.
    Input(usize),
    /// Graph output `i`: read back by the caller after each run.
    Output(usize),
    /// A constant, uploaded once at load.
    Weight(ValueId),
    /// Written and read by kernels only.
    Intermediate,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedBuffer {
    pub name: String,
    /// Bytes, a multiple of 4 and at least 4 (WebGPU has no zero-size bindings).
    pub size: u64,
    pub kind: BufferKind,
}

/// Where one value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub buffer: usize,
    pub offset: u64,
    pub size: u64,
}

/// Totals of a plan, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of the buffers intermediates are placed in.
    pub planned_bytes: u64,
    /// The most intermediate bytes live at any one dispatch step: no plan can use less.
    pub lower_bound_bytes: u64,
    /// Every intermediate in a buffer of its own.
    pub naive_bytes: u64,
    pub weights_bytes: u64,
    /// Graph inputs and outputs (buffers of their own).
    pub io_bytes: u64,
}

/// The dispatch steps during which an intermediate must keep its bytes: from the kernel that writes it to the
/// last kernel that reads it, both included (so a kernel's inputs and its output never share a buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub value: ValueId,
    pub bytes: u64,
    pub first: usize,
    pub last: usize,
    pub buffer: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct MemoryOptions {
    /// Let intermediates whose lifetimes do not overlap share a buffer (`false`: one buffer per value).
    pub reuse: bool,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions { reuse: true }
    }
}

/// The side table the emitter binds from.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    pub buffers: Vec<PlannedBuffer>,
    pub slots: HashMap<ValueId, Slot>,
    pub stats: MemoryStats,
    /// Intermediates in dispatch order of their first write.
    pub lifetimes: Vec<Lifetime>,
}

/// Places every value a kernel reads or writes. Graph inputs, outputs and weights get buffers of their own (callers
/// write inputs and read outputs without copies in the schedule). Intermediates are placed by liveness: each
/// lives from the dispatch that writes it to the last one that reads it, and values whose lifetimes do not
/// overlap share a buffer. An `Alias` shares its root's slot; values that live only inside a fused kernel, and
/// the outputs of folded copies, get none.
///
/// The placement is greedy by size (TFLite's and TVM's interval planners are the model): intermediates in
/// decreasing size take the smallest pool buffer that is free for their whole lifetime, or a new one. Buffers
/// are whole bindings at offset 0, so one dispatch never binds a buffer twice with different access (WebGPU
/// forbids read-only and read-write bindings of one buffer in a dispatch): a kernel's inputs are live at its
/// step, its output starts there, so they are never in one buffer.
///
/// Requires: a legalized graph and its schedule. Establishes (checked by [`verify_plan`]): every value bound by a
/// kernel has a slot inside its buffer; no two intermediates whose lifetimes overlap share a buffer; every slot's
/// offset is a multiple of [`ALIGN`].
pub fn plan_memory(g: &Graph, sched: &Schedule) -> Result<MemoryPlan, PassError> {
    plan_memory_with(g, sched, &MemoryOptions::default())
}

pub fn plan_memory_with(g: &Graph, sched: &Schedule, opts: &MemoryOptions) -> Result<MemoryPlan, PassError> {
    let mut plan = MemoryPlan::default();
    let mut root_slot: HashMap<ValueId, Slot> = HashMap::new();
    let size_of = |v: ValueId| (g.ty(v).numel() as u64 * 4).max(4);
    // A buffer of its own for `v`'s storage root (inputs, outputs, weights).
    let own = |plan: &mut MemoryPlan, root_slot: &mut HashMap<ValueId, Slot>, v: ValueId, kind: BufferKind| -> Slot {
        let root = storage_root(g, v);
        if let Some(&s) = root_slot.get(&root) {
            return s;
        }
        let size = size_of(root);
        plan.buffers.push(PlannedBuffer { name: g.value(root).name.clone(), size, kind });
        let slot = Slot { buffer: plan.buffers.len() - 1, offset: 0, size };
        root_slot.insert(root, slot);
        slot
    };
    for (i, &v) in g.inputs.iter().enumerate() {
        let s = own(&mut plan, &mut root_slot, v, BufferKind::Input(i));
        plan.slots.insert(v, s);
        plan.stats.io_bytes += s.size;
    }
    for (i, &v) in g.outputs.iter().enumerate() {
        let s = own(&mut plan, &mut root_slot, v, BufferKind::Output(i));
        plan.slots.insert(v, s);
        plan.stats.io_bytes += s.size;
    }

    // Lifetimes of intermediates (by storage root), in dispatch steps; weights get their own buffers.
    let mut first: HashMap<ValueId, usize> = HashMap::new();
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    let mut order: Vec<ValueId> = Vec::new();
    for (step, k) in sched.kernels.iter().enumerate() {
        let (reads, writes) = crate::schedule::group_io(g, sched, k);
        for v in reads {
            let root = storage_root(g, v);
            if root_slot.contains_key(&root) {
                continue;
            }
            if g.const_data(root).is_some() {
                let s = own(&mut plan, &mut root_slot, root, BufferKind::Weight(root));
                plan.stats.weights_bytes += s.size;
                continue;
            }
            last.insert(root, step);
        }
        for v in writes {
            let root = storage_root(g, v);
            if root_slot.contains_key(&root) {
                continue;
            }
            if first.insert(root, step).is_none() {
                order.push(root);
            }
            last.entry(root).or_insert(step);
        }
    }
    for &v in &order {
        let l = last[&v].max(first[&v]);
        plan.lifetimes.push(Lifetime { value: v, bytes: size_of(v), first: first[&v], last: l, buffer: usize::MAX });
    }

    // Two greedy orders, keeping the smaller plan: by size (larger values first, each into the smallest free
    // buffer) and by first use (the left-edge order, optimal for equal sizes; a free buffer grows when a value
    // does not fit).
    let spans: Vec<(usize, usize, u64)> = plan.lifetimes.iter().map(|l| (l.first, l.last, l.bytes)).collect();
    let (assign, sizes) = if opts.reuse {
        let mut by_size: Vec<usize> = (0..spans.len()).collect();
        by_size.sort_by_key(|&i| (std::cmp::Reverse(spans[i].2), spans[i].0, i));
        let mut by_first: Vec<usize> = (0..spans.len()).collect();
        by_first.sort_by_key(|&i| (spans[i].0, std::cmp::Reverse(spans[i].2), i));
        let a = greedy(&spans, &by_size);
        let b = greedy(&spans, &by_first);
        if b.1.iter().sum::<u64>() < a.1.iter().sum::<u64>() {
            b
        } else {
            a
        }
    } else {
        ((0..spans.len()).collect(), spans.iter().map(|s| s.2).collect())
    };
    let base = plan.buffers.len();
    for (k, &size) in sizes.iter().enumerate() {
        let name = if opts.reuse {
            format!("pool{k}")
        } else {
            g.value(plan.lifetimes[assign.iter().position(|&b| b == k).expect("used")].value).name.clone()
        };
        plan.buffers.push(PlannedBuffer { name, size, kind: BufferKind::Intermediate });
    }
    for (i, &b) in assign.iter().enumerate() {
        plan.lifetimes[i].buffer = base + b;
        root_slot.insert(plan.lifetimes[i].value, Slot { buffer: base + b, offset: 0, size: plan.lifetimes[i].bytes });
    }

    // Every value (aliases included) bound by a kernel takes its root's slot.
    for v in g.value_ids() {
        if g.value(v).ty.is_some() {
            if let Some(&s) = root_slot.get(&storage_root(g, v)) {
                plan.slots.insert(v, s);
            }
        }
    }
    plan.stats.naive_bytes = plan.lifetimes.iter().map(|l| l.bytes).sum();
    plan.stats.planned_bytes = sizes.iter().sum();
    let steps = sched.kernels.len();
    plan.stats.lower_bound_bytes = (0..steps)
        .map(|s| plan.lifetimes.iter().filter(|l| l.first <= s && s <= l.last).map(|l| l.bytes).sum::<u64>())
        .max()
        .unwrap_or(0);
    verify_plan(g, sched, &plan)?;
    Ok(plan)
}

/// Checks a plan's invariants: every value a kernel binds has a slot inside its buffer at an aligned offset, and
/// no two intermediates sharing a buffer are live at the same step.
pub fn verify_plan(g: &Graph, sched: &Schedule, plan: &MemoryPlan) -> Result<(), PassError> {
    let bad = |v: ValueId, reason: String| PassError::Value { value: g.value(v).name.clone(), reason };
    for k in &sched.kernels {
        let (reads, writes) = crate::schedule::group_io(g, sched, k);
        for v in reads.into_iter().chain(writes) {
            let s = plan
                .slots
                .get(&v)
                .ok_or_else(|| bad(v, "bound by a kernel but never placed (a planner bug)".into()))?;
            if s.offset % ALIGN != 0 || s.offset + s.size > plan.buffers[s.buffer].size {
                return Err(bad(v, "slot outside its buffer or misaligned (a planner bug)".into()));
            }
        }
    }
    for (i, a) in plan.lifetimes.iter().enumerate() {
        for b in &plan.lifetimes[i + 1..] {
            if a.buffer == b.buffer && !(a.last < b.first || b.last < a.first) {
                return Err(bad(
                    b.value,
                    format!("shares a buffer with '{}' while both are live (a planner bug)", g.value(a.value).name),
                ));
            }
        }
    }
    Ok(())
}

/// Places intervals `(first, last, bytes)` in the given order: each takes the smallest buffer that is free for its
/// whole span and large enough, else the largest free buffer grown to fit, else a new buffer. Returns each
/// interval's buffer and the buffers' sizes.
fn greedy(spans: &[(usize, usize, u64)], order: &[usize]) -> (Vec<usize>, Vec<u64>) {
    let mut assign = vec![0; spans.len()];
    let mut sizes: Vec<u64> = Vec::new();
    let mut busy: Vec<Vec<(usize, usize)>> = Vec::new();
    for &i in order {
        let (f, l, bytes) = spans[i];
        let free: Vec<usize> = (0..sizes.len()).filter(|&b| busy[b].iter().all(|&(a, z)| l < a || z < f)).collect();
        let b = match free.iter().copied().filter(|&b| sizes[b] >= bytes).min_by_key(|&b| (sizes[b], b)) {
            Some(b) => b,
            None => match free.iter().copied().max_by_key(|&b| (sizes[b], std::cmp::Reverse(b))) {
                Some(b) => {
                    sizes[b] = bytes;
                    b
                }
                None => {
                    sizes.push(bytes);
                    busy.push(vec![]);
                    sizes.len() - 1
                }
            },
        };
        busy[b].push((f, l));
        assign[i] = b;
    }
    (assign, sizes)
}
