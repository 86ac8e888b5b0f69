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

/// The side table the emitter binds from.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    pub buffers: Vec<PlannedBuffer>,
    pub slots: HashMap<ValueId, Slot>,
}

/// Places every value a kernel reads or writes: one buffer per storage root (graph inputs, outputs, weights and
/// intermediates each get their own); an `Alias` output shares its root's slot. Values that live only inside a
/// fused kernel, and the outputs of folded copies, get no slot.
///
/// Requires: a legalized graph and its schedule. Establishes: every value bound by a kernel has a slot; no two
/// values whose storage roots differ share bytes; every slot's offset is a multiple of [`ALIGN`].
pub fn plan_memory(g: &Graph, sched: &Schedule) -> Result<MemoryPlan, PassError> {
    let mut plan = MemoryPlan::default();
    let mut root_slot: HashMap<ValueId, Slot> = HashMap::new();
    let mut place = |plan: &mut MemoryPlan, v: ValueId, kind: BufferKind| -> Slot {
        let root = storage_root(g, v);
        if let Some(&s) = root_slot.get(&root) {
            return s;
        }
        let size = (g.ty(root).numel() as u64 * 4).max(4);
        let kind = match kind {
            BufferKind::Intermediate if g.const_data(root).is_some() => BufferKind::Weight(root),
            k => k,
        };
        plan.buffers.push(PlannedBuffer { name: g.value(root).name.clone(), size, kind });
        let slot = Slot { buffer: plan.buffers.len() - 1, offset: 0, size };
        root_slot.insert(root, slot);
        slot
    };
    for (i, &v) in g.inputs.iter().enumerate() {
        let s = place(&mut plan, v, BufferKind::Input(i));
        plan.slots.insert(v, s);
    }
    for (i, &v) in g.outputs.iter().enumerate() {
        let s = place(&mut plan, v, BufferKind::Output(i));
        plan.slots.insert(v, s);
    }
    for k in &sched.kernels {
        let (reads, writes) = crate::schedule::group_io(g, sched, k);
        for v in reads.into_iter().chain(writes) {
            let s = place(&mut plan, v, BufferKind::Intermediate);
            plan.slots.insert(v, s);
        }
    }
    // Every alias of a placed value shares its slot (kernels may bind either name).
    for v in g.value_ids() {
        if !plan.slots.contains_key(&v) && g.value(v).ty.is_some() {
            if let Some(&s) = plan.slots.get(&storage_root(g, v)) {
                plan.slots.insert(v, s);
            }
        }
    }
    Ok(plan)
}
