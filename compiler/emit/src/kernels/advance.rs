//! The decode loop's advance kernel: what generation writes between two decode steps, computed on the GPU so that
//! the steps of a submit follow each other in one compute pass (no copies between them).

use super::{storage, EmittedKernel, Header, LoaderKind};
use crate::EmitError;
use askama::Template;
use wgslc_ir::{Graph, ValueId};
use wgslc_passes::MemoryPlan;

/// The tensors the advance kernel reads and writes: every one a graph input or output (each in a buffer of its
/// own), the token read-only, the others written.
#[derive(Clone, Debug)]
pub struct Advance {
    pub name: String,
    /// The step's chosen token (integers, one element).
    pub token: ValueId,
    /// The token history, `capacity` integers.
    pub tokens: ValueId,
    /// The decode step's loop inputs: its token, the row it writes the cache at (also the position of its token),
    /// its attention mask over the `capacity` rows and, where the model takes them, its position ids.
    pub input_ids: ValueId,
    pub cache_row: ValueId,
    pub attention_mask: ValueId,
    pub position_ids: Option<ValueId>,
    pub capacity: usize,
}

struct Var {
    var: &'static str,
    ty: &'static str,
}

#[derive(Template)]
#[template(path = "advance.wgsl", escape = "none")]
struct AdvanceTpl {
    h: Header,
    token: &'static str,
    tokens: Var,
    ids: Var,
    row: Var,
    mask: Var,
    positions: Option<Var>,
    capacity: usize,
}

/// The advance kernel of [`Advance`]: one invocation.
pub fn advance(g: &Graph, plan: &MemoryPlan, a: &Advance) -> Result<EmittedKernel, EmitError> {
    let mut bindings = vec![
        (a.token, false, "token"),
        (a.tokens, true, "tokens"),
        (a.input_ids, true, "ids"),
        (a.cache_row, true, "row"),
        (a.attention_mask, true, "mask"),
    ];
    bindings.extend(a.position_ids.map(|p| (p, true, "positions")));
    let pairs: Vec<(ValueId, bool)> = bindings.iter().map(|&(v, w, _)| (v, w)).collect();
    let buffers: std::collections::HashSet<usize> = pairs.iter().map(|&(v, _)| plan.slots[&v].buffer).collect();
    if buffers.len() != pairs.len() {
        let message = "the loop's tensors share buffers (a wgslc bug: inputs and outputs have buffers of their own)";
        return Err(EmitError::InvalidWgsl { kernel: a.name.clone(), message: message.into() });
    }
    let var = |i: usize| Var { var: bindings[i].2, ty: storage(g, bindings[i].0).wgsl() };
    let comment = format!("the decode loop's advance over {} tokens", a.capacity);
    let h = Header::new(g, plan, a.name.clone(), comment, "advance.wgsl", &bindings);
    let tpl = AdvanceTpl {
        h,
        token: "token",
        tokens: var(1),
        ids: var(2),
        row: var(3),
        mask: var(4),
        positions: a.position_ids.map(|_| var(5)),
        capacity: a.capacity,
    };
    let wgsl = tpl
        .render()
        .map_err(|e| EmitError::InvalidWgsl { kernel: a.name.clone(), message: format!("template error: {e}") })?;
    Ok(EmittedKernel {
        name: a.name.clone(),
        kind: "advance",
        nodes: vec![],
        wgsl,
        subgroups: None,
        stored_bytes: None,
        bindings: pairs,
        workgroups: [1, 1, 1],
        grid: [None; 3],
    })
}
