//! ONNX Attention expanded into the products, softmax and masks it computes.

use super::*;

/// ONNX Attention, following the reference implementation: 3-D inputs split into heads, Q and K each scaled by
/// √scale, past K/V concatenated, an additive bias from the mask (bool → 0/−inf, padded to the key length) and
/// the causal frontier (offset by the past length), GQA by repeating KV heads, softcap, softmax with
/// fully-masked rows zeroed, and the product with V.
pub(super) fn attention(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    at: &AttentionAttrs,
    err: &dyn Fn(String) -> PassError,
) -> Result<Vec<Option<ValueId>>, PassError> {
    let get = |i: usize| inputs.get(i).copied().flatten();
    let (q, k, v) = match (get(0), get(1), get(2)) {
        (Some(q), Some(k), Some(v)) => (q, k, v),
        _ => return Err(err("needs Q, K and V".into())),
    };
    if get(6).is_some() {
        return Err(err("nonpad_kv_seqlen is not supported".into()));
    }
    let tyof = |b: &Builder, v: ValueId| b.g.ty(v).clone();
    let qt = tyof(b, q);
    let dt = qt.dtype;
    let three_d = qt.rank() == 3;
    if [k, v].iter().any(|&x| b.g.ty(x).rank() != qt.rank()) {
        return Err(err(format!("Q, K and V must have one rank (Q is {}-D)", qt.rank())));
    }
    let (mut q4, mut k4, mut v4) = (q, k, v);
    if three_d {
        let (hq, hk) = match (at.q_num_heads, at.kv_num_heads) {
            (Some(a), Some(c)) if a > 0 && c > 0 => (a, c),
            _ => return Err(err("3-D inputs need q_num_heads and kv_num_heads".into())),
        };
        let split = |b: &mut Builder, x: ValueId, h: usize| -> Result<ValueId, PassError> {
            let s = b.g.ty(x).shape.clone();
            if !s[2].is_multiple_of(h) {
                return Err(err(format!("hidden size {} does not split into {h} heads", s[2])));
            }
            let r = b.reshape(x, &[s[0], s[1], h, s[2] / h])?;
            Ok(b.transpose(r, &[0, 2, 1, 3])?)
        };
        q4 = split(b, q, hq)?;
        k4 = split(b, k, hk)?;
        v4 = split(b, v, hk)?;
    } else if qt.rank() != 4 {
        return Err(err("Q must be 3-D or 4-D".into()));
    }
    // Types of the 4-D views, computed here because the builder's nodes are inferred later.
    let qs = if three_d {
        let h = at.q_num_heads.unwrap();
        vec![qt.shape[0], h, qt.shape[1], qt.shape[2] / h]
    } else {
        qt.shape.clone()
    };
    let kv_shape = |b: &Builder, x: ValueId| -> Vec<usize> {
        let s = b.g.ty(x).shape.clone();
        if three_d {
            let h = at.kv_num_heads.unwrap();
            vec![s[0], h, s[1], s[2] / h]
        } else {
            s
        }
    };
    let (mut ks, mut vs) = (kv_shape(b, k), kv_shape(b, v));
    let head = qs[3];
    let scale = at.scale.map(|s| s as f64).unwrap_or(1.0 / (head as f64).sqrt()).sqrt();

    // Past cache.
    let past_len = match (get(4), get(5)) {
        (Some(pk), Some(pv)) => {
            let pl = b.g.ty(pk).shape[2];
            k4 = b.op(Op::Concat { axis: 2 }, &[Some(pk), Some(k4)])?;
            v4 = b.op(Op::Concat { axis: 2 }, &[Some(pv), Some(v4)])?;
            ks[2] += pl;
            vs[2] += b.g.ty(pv).shape[2];
            pl
        }
        (None, None) => 0,
        _ => return Err(err("past_key and past_value go together".into())),
    };
    let (present_k, present_v) = (k4, v4);
    let (sq, sk) = (qs[2], ks[2]);

    // Additive bias [.., sq, sk] from the mask and the causal frontier.
    let neg_inf = f64::NEG_INFINITY;
    let mut bias: Option<ValueId> = None;
    if let Some(mask) = get(3) {
        let mt = b.g.ty(mask).clone();
        let mut m = mask;
        if mt.dtype == DType::Bool {
            let zero = b.scalar(dt, 0.0);
            let ninf = b.scalar(dt, neg_inf);
            m = b.op(Op::Where, &[Some(m), Some(zero), Some(ninf)])?;
        }
        let short = sk.saturating_sub(*mt.shape.last().unwrap_or(&sk));
        if short > 0 {
            let r = mt.rank();
            let mut pads = vec![0i64; 2 * r];
            pads[2 * r - 1] = short as i64;
            let p = b.ints(&pads);
            let fill = b.scalar(dt, neg_inf);
            m = b.op(
                Op::Pad { mode: wgslc_ir::PadMode::Constant, pads: None, value: 0.0 },
                &[Some(m), Some(p), Some(fill)],
            )?;
        }
        bias = Some(m);
    }
    if at.is_causal {
        let c: Vec<f64> = (0..sq * sk)
            .map(|i| if (i % sk) as i64 <= (i / sk) as i64 + past_len as i64 { 0.0 } else { neg_inf })
            .collect();
        let causal = b.konst(Tensor::from_f64(dt, vec![sq, sk], c));
        bias = Some(match bias {
            Some(m) => b.bin(BinaryOp::Add, m, causal)?,
            None => causal,
        });
    }

    // GQA: repeat each KV head (interleaved: h0, h0, h1, h1, …).
    let (hq, hk) = (qs[1], ks[1]);
    if hq != hk {
        if hk == 0 || hq % hk != 0 {
            return Err(err(format!("{hq} query heads do not group over {hk} KV heads")));
        }
        let rep = |b: &mut Builder, x: ValueId, s: &[usize]| -> Result<ValueId, PassError> {
            let u = b.reshape(x, &[s[0], s[1], 1, s[2], s[3]])?;
            let sh = b.ints(&[s[0] as i64, s[1] as i64, (hq / hk) as i64, s[2] as i64, s[3] as i64]);
            let e = b.op(Op::Expand, &[Some(u), Some(sh)])?;
            Ok(b.reshape(e, &[s[0], hq, s[2], s[3]])?)
        };
        k4 = rep(b, k4, &ks)?;
        v4 = rep(b, v4, &vs)?;
    }

    let mut qk = if at.own_key_seen {
        // The scores scaled after the product (K read as it is: from the cache, by the attention kernel).
        let kt = b.transpose(k4, &[0, 1, 3, 2])?;
        let p = b.op(Op::MatMul, &[Some(q4), Some(kt)])?;
        let sc = b.scalar(dt, scale * scale);
        b.bin(BinaryOp::Mul, p, sc)?
    } else {
        // Q scaled by the whole scale (the reference scales Q and K by its square root each; equal up to
        // rounding), so K is read as it is: from the cache, by the attention kernel.
        let sc = b.scalar(dt, scale * scale);
        let qs_ = b.bin(BinaryOp::Mul, q4, sc)?;
        let kt = b.transpose(k4, &[0, 1, 3, 2])?;
        b.op(Op::MatMul, &[Some(qs_), Some(kt)])?
    };
    let raw_qk = qk;
    if at.softcap > 0.0 {
        let c = b.scalar(dt, at.softcap as f64);
        let d = b.bin(BinaryOp::Div, qk, c)?;
        let t = b.un(Op::Unary(UnaryOp::Tanh), d)?;
        qk = b.bin(BinaryOp::Mul, t, c)?;
    }
    let capped = qk;
    let with_bias = match bias {
        Some(m) => b.bin(BinaryOp::Add, qk, m)?,
        None => qk,
    };
    let mut p = b.op(Op::Softmax { axis: -1, legacy: false, log: false }, &[Some(with_bias)])?;
    if bias.is_some() && !at.own_key_seen {
        // Rows whose bias is -inf everywhere attend to nothing: their softmax is NaN (-inf minus its -inf
        // maximum), zeroed as PyTorch's SDPA export guards it, the form the fused attention kernel takes.
        let dead = b.un(Op::Unary(UnaryOp::IsNaN), p)?;
        let zero = b.scalar(dt, 0.0);
        p = b.op(Op::Where, &[Some(dead), Some(zero), Some(p)])?;
    }
    let mut y = b.op(Op::MatMul, &[Some(p), Some(v4)])?;
    if three_d {
        let t = b.transpose(y, &[0, 2, 1, 3])?;
        let s = [qs[0], qs[2], qs[1] * vs[3]];
        y = b.reshape(t, &s)?;
    }
    let qk_out = match at.qk_matmul_output_mode {
        0 => raw_qk,
        1 => capped,
        2 => with_bias,
        3 => p,
        m => return Err(err(format!("unknown qk_matmul_output_mode {m}"))),
    };
    Ok(vec![Some(y), Some(present_k), Some(present_v), Some(qk_out)])
}
