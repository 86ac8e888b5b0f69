//! LSTM, GRU and RNN: the input projection of every step at once (one MatMul with the biases that do not depend
//! on the state), then the time loop as one [`Op::Recurrence`] node, whose kernel walks the steps inside one
//! dispatch (a workgroup per direction and batch element). Batch-major layouts are transposed around it.

use crate::PassError;
use wgslc_ir::{BinaryOp, Builder, Cell, DType, Op, RnnAttrs, Tensor, TensorType, ValueId};

pub(super) fn expand(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    types: &[Option<TensorType>],
    at: &RnnAttrs,
    err: &dyn Fn(String) -> PassError,
) -> Result<Vec<Option<ValueId>>, PassError> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let ty = |i: usize| types.get(i).cloned().flatten();
    let (Some(x), Some(w), Some(r)) = (input(0), input(1), input(2)) else {
        return Err(err("X, W and R are required".into()));
    };
    let (xt, wt, rt) = (ty(0).expect("typed"), ty(1).expect("typed"), ty(2).expect("typed"));
    if xt.rank() != 3 || xt.dtype != DType::F32 {
        return Err(err(format!("X must be a float32 tensor of rank 3, got {xt}")));
    }
    let (t, bsz, isz) =
        if at.batch_major { (xt.shape[1], xt.shape[0], xt.shape[2]) } else { (xt.shape[0], xt.shape[1], xt.shape[2]) };
    let (d, g) = (at.directions, at.cell.gates());
    let h = rt.shape.get(2).copied().unwrap_or(0);
    if rt.shape != [d, g * h, h] || wt.shape != [d, g * h, isz] || (at.hidden != 0 && at.hidden != h) || h == 0 {
        return Err(err(format!(
            "W {:?} and R {:?} do not fit {d} direction(s), {g} gates, {} hidden units and {isz} inputs",
            wt.shape, rt.shape, at.hidden
        )));
    }
    if t == 0 || bsz == 0 {
        return Err(err(format!("X {:?} has no steps or no batch", xt.shape)));
    }
    let at = RnnAttrs { hidden: h, ..at.clone() };
    let gh = g * h;

    // Inputs of every step projected at once: [1, T·B, I] · [D, I, G·H] → [D, T·B, G·H], plus biases.
    let xs = if at.batch_major { b.transpose(x, &[1, 0, 2])? } else { x };
    let xs = b.reshape(xs, &[1, t * bsz, isz])?;
    let w_t = b.transpose(w, &[0, 2, 1])?;
    let mut xw = b.op(Op::MatMul, &[Some(xs), Some(w_t)])?;
    let mut rbh = None;
    if let Some(bias) = input(3) {
        if ty(3).expect("typed").shape != [d, 2 * gh] {
            return Err(err(format!("B must be [{d}, {}], got {}", 2 * gh, ty(3).expect("typed"))));
        }
        let slice = |b: &mut Builder, from: usize, to: usize| -> Result<ValueId, PassError> {
            let (s, e, ax) = (b.ints(&[from as i64]), b.ints(&[to as i64]), b.ints(&[1]));
            Ok(b.op(Op::Slice, &[Some(bias), Some(s), Some(e), Some(ax)])?)
        };
        let wb = slice(b, 0, gh)?;
        let mut rb = slice(b, gh, 2 * gh)?;
        if let Cell::Gru { linear_before_reset: true } = at.cell {
            // The h gate's recurrent bias is added inside r ⊙ (…): the kernel takes it apart.
            rbh = Some(slice(b, gh + 2 * h, 2 * gh)?);
            let mask: Vec<f32> = (0..gh).map(|j| if j < 2 * h { 1.0 } else { 0.0 }).collect();
            let mask = b.konst(Tensor::f32(vec![gh], mask));
            rb = b.bin(BinaryOp::Mul, rb, mask)?;
        }
        let total = b.bin(BinaryOp::Add, wb, rb)?;
        let total = b.reshape(total, &[d, 1, gh])?;
        xw = b.bin(BinaryOp::Add, xw, total)?;
    }
    let xw = b.reshape(xw, &[d, t, bsz, gh])?;
    let r_t = b.transpose(r, &[0, 2, 1])?;

    // The initial state [S, D, B, H]: h, then c for LSTM; zeros for whatever is not given.
    let lstm = matches!(at.cell, Cell::Lstm { .. });
    let (h0, c0) = (input(5), if lstm { input(6) } else { None });
    let state_shape = [d, bsz, h];
    for (i, v) in [(5, h0), (6, c0)] {
        if v.is_some() && ty(i).expect("typed").shape != state_shape {
            return Err(err(format!("initial state input {i} must be {state_shape:?}, got {}", ty(i).expect("typed"))));
        }
    }
    let state0 = if h0.is_none() && c0.is_none() {
        None
    } else {
        let zeros = |b: &mut Builder| b.konst(Tensor::f32(state_shape.to_vec(), vec![0.0; d * bsz * h]));
        let mut parts = vec![h0.unwrap_or_else(|| zeros(b))];
        if lstm {
            parts.push(c0.unwrap_or_else(|| zeros(b)));
        }
        let mut wide = Vec::new();
        for p in parts {
            wide.push(Some(b.reshape(p, &[1, d, bsz, h])?));
        }
        Some(if wide.len() == 1 { wide[0].expect("set") } else { b.op(Op::Concat { axis: 0 }, &wide)? })
    };
    let peep = if lstm { input(7) } else { None };
    if peep.is_some() && ty(7).expect("typed").shape != [d, 3 * h] {
        return Err(err(format!("P must be [{d}, {}], got {}", 3 * h, ty(7).expect("typed"))));
    }
    let lens = input(4);
    if lens.is_some() && ty(4).expect("typed").shape != [bsz] {
        return Err(err(format!("sequence_lens must be [{bsz}], got {}", ty(4).expect("typed"))));
    }

    let y = b.value("y", None);
    let state = b.value("state", None);
    let rec_inputs = [Some(xw), Some(r_t), state0, peep, lens, rbh];
    b.op_into("recurrence", Op::Recurrence(Box::new(at.clone())), &rec_inputs, vec![y, state])?;

    let y = if at.batch_major { b.transpose(y, &[2, 0, 1, 3])? } else { y };
    let mut results = vec![Some(y)];
    for k in 0..at.cell.states() {
        let idx = b.konst(Tensor::i64(vec![], vec![k as i64]));
        let s = b.op(Op::Gather { axis: 0 }, &[Some(state), Some(idx)])?;
        results.push(Some(if at.batch_major { b.transpose(s, &[1, 0, 2])? } else { s }));
    }
    Ok(results)
}
