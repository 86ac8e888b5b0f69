//! The decoder section of plan.json (`--kv-cache`): each step's loop tensors as plan indices, and each step's
//! dispatches.
//!
//! Both steps are compiled as one graph, scheduled and memory-planned as one sequence of kernels. A step runs the
//! subsequence of kernels its outputs depend on: every value such a kernel reads was written earlier in the
//! subsequence, and no kernel of the subsequence writes memory that the whole sequence keeps live across it, so
//! the step computes what the whole sequence would (the memory plan's liveness covers both steps' values).

use crate::CompileError;
use std::collections::{HashMap, HashSet};
use wgslc_artifact as art;
use wgslc_emit::Validated;
use wgslc_ir::{Graph, ValueId};
use wgslc_passes::DecoderLayout;

/// The advance kernels of a decode step that writes in place (see `wgslc_artifact::Advance`): one reading the
/// greedy token, one the sampled token; none for a step that copies its rows.
pub(crate) fn advance_kernels(
    g: &Graph,
    mem: &wgslc_passes::MemoryPlan,
    layout: &DecoderLayout,
    limits: &wgslc_emit::Limits,
) -> Result<Vec<Validated>, CompileError> {
    let err = |m: String| CompileError::Decoder(m);
    let value = |name: &str, among: &[ValueId]| {
        among
            .iter()
            .copied()
            .find(|&v| g.value(v).name == name)
            .ok_or_else(|| err(format!("the compiled graph has no input or output '{name}'")))
    };
    let Some(s) = layout.steps.iter().find(|s| s.tokens == 1 && s.cache_row.is_some()) else {
        return Ok(vec![]);
    };
    let ins = &g.inputs;
    let mut out = Vec::new();
    for (what, token) in [("greedy", &s.next_token), ("sample", &s.sampled_token)] {
        let a = wgslc_emit::Advance {
            name: format!("wgslc.advance/{what}"),
            token: value(token, &g.outputs)?,
            tokens: value(&layout.tokens, ins)?,
            input_ids: value(&s.input_ids, ins)?,
            cache_row: value(s.cache_row.as_deref().expect("an in-place step"), ins)?,
            attention_mask: value(&s.attention_mask, ins)?,
            // A loop input the model ignores was removed with the code that read it.
            position_ids: s.position_ids.as_deref().and_then(|p| value(p, ins).ok()),
            capacity: layout.rows + 1,
        };
        out.push(wgslc_emit::validate(wgslc_emit::advance(g, mem, &a)?, limits)?);
    }
    Ok(out)
}

/// `kernels`: the plan's dispatched kernels (those of `Plan::dispatches`); `advance`: where the plan holds the
/// decode step's advance kernels, when it writes in place (see [`advance_kernels`]).
pub(crate) fn section(
    g: &Graph,
    plan: &art::Plan,
    kernels: &[Validated],
    advance: Option<art::Advance>,
    mem: &wgslc_passes::MemoryPlan,
    layout: &DecoderLayout,
) -> Result<art::Decoder, CompileError> {
    // Values are compared by the value they are views of (an output may alias the value a kernel writes); not by
    // storage, which would tell a cache written in place from the cache it was before the write (the prefill
    // step reads the cache, the decode step's in-place write is no part of it).
    let root = |v: ValueId| wgslc_passes::alias_root(g, v);
    let err = |m: String| CompileError::Decoder(m);
    let input = |name: &str| plan.inputs.iter().position(|t| t.name == name);
    let output = |name: &str| plan.outputs.iter().position(|t| t.name == name);
    let need_in = |name: &str| input(name).ok_or_else(|| err(format!("the compiled graph has no input '{name}'")));
    let need_out = |name: &str| output(name).ok_or_else(|| err(format!("the compiled graph has no output '{name}'")));
    let state = layout
        .state
        .iter()
        .map(|(name, axis)| Ok(art::StateSpec { input: need_in(name)?, axis: *axis }))
        .collect::<Result<Vec<_>, CompileError>>()?;
    let by_name: HashMap<&str, ValueId> = g.outputs.iter().map(|&v| (g.value(v).name.as_str(), v)).collect();
    // The dispatches that compute `outs`, in order: backwards over the kernels, one that writes a needed value is
    // needed, and so is everything it reads (an in-place kernel reads its input through its output binding).
    // Written values stay needed: several kernels may write parts of one value (a Concat written in place).
    let closure = |outs: &[&str]| -> Result<Vec<usize>, CompileError> {
        let mut needed: HashSet<ValueId> = HashSet::new();
        for o in outs {
            needed.insert(root(*by_name.get(o).ok_or_else(|| err(format!("the compiled graph has no output '{o}'")))?));
        }
        let mut dispatches = Vec::new();
        for (i, k) in kernels.iter().enumerate().rev() {
            if k.kernel.bindings.iter().any(|&(v, w)| w && needed.contains(&root(v))) {
                dispatches.push(i);
                for &(v, _) in &k.kernel.bindings {
                    let r = root(v);
                    needed.insert(r);
                    needed.extend(mem.in_place.get(&r).copied());
                }
            }
        }
        dispatches.reverse();
        Ok(dispatches)
    };
    let mut steps = Vec::new();
    for s in &layout.steps {
        let mut outs = vec![s.logits.as_str()];
        outs.extend(s.present.iter().map(|(o, _)| o.as_str()));
        let dispatches = closure(&[&outs[..], &[s.next_token.as_str()]].concat())?;
        let sample = art::StepSample {
            token: need_out(&s.sampled_token)?,
            dispatches: closure(&[&outs[..], &[s.sampled_token.as_str()]].concat())?,
            temperature: need_in(&layout.temperature)?,
            params: need_in(&layout.sampling)?,
        };
        steps.push(art::Step {
            name: s.name.into(),
            tokens: s.tokens,
            dispatches,
            input_ids: need_in(&s.input_ids)?,
            attention_mask: need_in(&s.attention_mask)?,
            // A loop input the model ignores was removed with the code that read it.
            position_ids: s.position_ids.as_deref().and_then(input),
            cache_position: s.cache_position.as_deref().and_then(input),
            last_index: s.last_index.as_deref().and_then(input),
            logits: need_out(&s.logits)?,
            next_token: need_out(&s.next_token)?,
            present: s
                .present
                .iter()
                .map(|(o, r)| Ok(art::Present { output: need_out(o)?, first_row: *r }))
                .collect::<Result<_, CompileError>>()?,
            cache_row: s.cache_row.as_deref().map(need_in).transpose()?,
            sample: Some(sample),
            advance: advance.filter(|_| s.tokens == 1 && s.cache_row.is_some()),
        });
    }
    let tokens = Some(need_in(&layout.tokens)?);
    Ok(art::Decoder { capacity: layout.rows + 1, rows: layout.rows, state, steps, tokens })
}
