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
    let mut d = art::Decoder { capacity: layout.rows + 1, rows: layout.rows, state, steps, tokens, program: None };
    d.program = Some(program(plan, &d)?);
    Ok(d)
}

/// The loop as data (see `wgslc_artifact::Program`): what each phase of a generation writes into the steps' loop
/// inputs under this artifact's cache layout, and what it replays and copies.
///
/// Prefill chunks of `n` tokens at `pos` (`real` of them before the padding, which repeats the last token): a
/// step that writes its cache in place sees every key at its position, so its mask is the rows before the chunk's
/// end and its tokens' cache positions are their positions; a step that copies its rows sees the cache's `rows`
/// rows as a window (those before `pos` valid) followed by its own `n` (the real ones valid), its cache positions
/// after the window, and its new rows are copied into the cache at `pos`. Decode steps: in place, the advance
/// kernel after each moves row, position and mask word on; copying, each step's position comes from a constant
/// iota, its token is copied into the history and the next step's `input_ids`, and its rows and a mask word of 1
/// into the cache at its position.
fn program(plan: &art::Plan, d: &art::Decoder) -> Result<art::Program, CompileError> {
    use art::{Affine, Buf, Instr, Iota, Mask, Place, Values};
    let err = |m: &str| CompileError::Decoder(m.into());
    let step =
        |name: &str| d.steps.iter().position(|s| s.name == name).ok_or_else(|| err(&format!("no '{name}' step")));
    let (pi, di) = (step("prefill")?, step("decode")?);
    let (pf, dc) = (&d.steps[pi], &d.steps[di]);
    let history = d.tokens.ok_or_else(|| err("no token history"))?;
    let (n, rows) = (pf.tokens as i64, d.rows as i64);
    let c = Affine::c;
    let pos = Affine { pos: 1, ..Affine::default() };
    let real = Affine { real: 1, ..Affine::default() };
    let len = Affine { len: 1, ..Affine::default() };
    let plus = |a: Affine, k: i64| Affine { c: a.c + k, ..a };
    let scaled = |a: Affine, k: i64| Affine { c: a.c * k, pos: a.pos * k, real: a.real * k, len: a.len * k };
    let write = |input: usize, values: Values| Instr::Write(art::Write { input, values });
    let iota = |len: Affine, start: Affine, last: Option<Affine>| Values::Iota(Iota { len, start, last });
    let copy = |from: Buf, from_at: Affine, to: Buf, to_at: Affine, bytes: Affine| {
        Instr::Copy(art::Copy {
            from: Place { buffer: from, offset: from_at },
            to: Place { buffer: to, offset: to_at },
            bytes,
        })
    };
    // A step's new rows of every cache into the cache at row `pos`, `count` of them.
    let rows_into_cache = |st: &art::Step, count: Affine| -> Vec<Instr> {
        let mut out = Vec::new();
        for (s, p) in d.state.iter().zip(&st.present) {
            let (past, new) = (&plan.inputs[s.input], &plan.outputs[p.output]);
            let outer: usize = past.shape[..s.axis].iter().product();
            let row = 4 * past.shape[s.axis + 1..].iter().product::<usize>() as i64;
            let (src_rows, dst_rows) = (new.shape[s.axis] as i64, past.shape[s.axis] as i64);
            for o in 0..outer as i64 {
                let to = Affine { c: o * dst_rows * row, pos: row, ..Affine::default() };
                out.push(copy(
                    Buf::Output(p.output),
                    c((o * src_rows + p.first_row as i64) * row),
                    Buf::Input(s.input),
                    to,
                    scaled(count, row),
                ));
            }
        }
        out
    };
    let last_real = Some(plus(real, -1));
    let mut chunk = vec![write(pf.input_ids, Values::Prompt(Iota { len: c(n), start: pos, last: last_real }))];
    let in_place = pf.cache_row.is_some();
    let (keys, ranges) = if in_place {
        (d.capacity as i64, vec![[c(0), plus(pos, n)]])
    } else {
        (rows + n, vec![[c(0), pos], [c(rows), plus(real, rows)]])
    };
    chunk.push(write(pf.attention_mask, Values::Mask(Mask { len: c(keys), ranges })));
    chunk.extend(pf.position_ids.map(|i| write(i, iota(c(n), pos, last_real))));
    chunk.extend(pf.cache_position.map(|i| write(i, iota(c(n), if in_place { pos } else { c(rows) }, None))));
    chunk.extend(pf.cache_row.map(|i| write(i, iota(c(1), pos, None))));
    chunk.extend(pf.last_index.map(|i| write(i, iota(c(1), plus(real, -1), None))));
    chunk.push(Instr::Run(pi));
    chunk.extend(rows_into_cache(pf, real));
    let last = vec![
        copy(Buf::Token(pi), c(0), Buf::Input(history), scaled(len, 4), c(4)),
        copy(Buf::Token(pi), c(0), Buf::Input(dc.input_ids), c(0), c(4)),
    ];
    let advances = dc.advance.is_some();
    let ranges = if advances { vec![[c(0), plus(len, 1)]] } else { vec![[c(0), len], [c(rows), c(rows + 1)]] };
    let mut decode_start = vec![write(dc.attention_mask, Values::Mask(Mask { len: c(rows + 1), ranges }))];
    decode_start.extend(dc.cache_position.map(|i| write(i, iota(c(1), c(rows), None))));
    let (mut constants, mut step) = (Vec::new(), vec![Instr::Run(di)]);
    if advances {
        for i in [dc.cache_row, dc.position_ids].into_iter().flatten() {
            decode_start.push(write(i, iota(c(1), len, None)));
        }
        step.push(Instr::Advance(di));
    } else {
        if let Some(p) = dc.position_ids {
            constants.push(art::Constant { like: p, values: iota(c(d.capacity as i64), c(0), None) });
            step.insert(0, copy(Buf::Constant(0), scaled(pos, 4), Buf::Input(p), c(0), c(4)));
        }
        step.push(copy(Buf::Token(di), c(0), Buf::Input(history), plus(scaled(pos, 4), 4), c(4)));
        step.push(copy(Buf::Token(di), c(0), Buf::Input(dc.input_ids), c(0), c(4)));
        step.extend(rows_into_cache(dc, c(1)));
        constants.push(art::Constant { like: dc.attention_mask, values: iota(c(1), c(1), None) });
        step.push(copy(Buf::Constant(constants.len() - 1), c(0), Buf::Input(dc.attention_mask), scaled(pos, 4), c(4)));
    }
    let mut start: Vec<Instr> = vec![write(history, Values::Prompt(Iota { len, start: c(0), last: None }))];
    start.extend(d.state.iter().map(|s| Instr::Clear(s.input)));
    Ok(art::Program { constants, start, chunk, last, decode_start, step })
}
