//! Identity-like ops, reshapes, permutes, slices, concatenation, splits, padding and constants.

use super::*;

impl Importer<'_> {
    /// An identity-like, shape or constant op: whether `base` is one (then translated).
    pub(super) fn shapes(&mut self, n: &N, base: &str, overload: &str) -> R<bool> {
        let done: R<()> = match base {
            // ---- identity-like ----
            "clone" | "contiguous" | "alias" | "detach" | "lift_fresh_copy" | "lift_fresh" | "dropout"
            | "feature_dropout" | "alpha_dropout" | "view_as" | "_unsafe_view_as" => {
                if base.contains("dropout") && self.boolean(n, "train", false)? {
                    return Err(n.err("dropout in training mode: export after model.eval()"));
                }
                let (in_dt, in_shape) = self.arg_meta(n, if base.contains("dropout") { "input" } else { "self" })?;
                let x = self.t(n, if base.contains("dropout") { "input" } else { "self" })?;
                let (out_dt, _) = self.out_meta(n, 0)?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                self.reshape_to_out(n, x, 0, Some(in_shape))
            }
            "_to_copy" | "to" | "type_as" | "_to_dtype" => {
                let x = self.t(n, "self")?;
                let (in_dt, _) = self.arg_meta(n, "self")?;
                let (out_dt, _) = self.out_meta(n, 0)?;
                let y = self.cast(n, x, in_dt, out_dt)?;
                self.alias(n, 0, y)
            }
            // ---- shapes: reshapes to the size torch recorded ----
            "view" | "_unsafe_view" | "reshape" | "view_copy" | "squeeze" | "unsqueeze" | "flatten" | "unflatten"
            | "squeeze_copy" | "unsqueeze_copy" => {
                let x = self.t(n, "self")?;
                let (_, from) = self.arg_meta(n, "self")?;
                self.reshape_to_out(n, x, 0, Some(from))
            }
            "permute" | "permute_copy" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let dims = self.ints(n, "dims", None)?;
                let perm = dims.iter().map(|&d| self.dim(n, d, shape.len())).collect::<R<Vec<_>>>()?;
                let x = self.t(n, "self")?;
                self.transpose(n, x, perm)
            }
            "transpose" | "t" | "numpy_T" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let r = shape.len();
                let mut perm: Vec<usize> = (0..r).collect();
                if r >= 2 {
                    let (a, b) = if base == "transpose" {
                        (self.dim(n, self.int(n, "dim0", None)?, r)?, self.dim(n, self.int(n, "dim1", None)?, r)?)
                    } else {
                        (r - 2, r - 1)
                    };
                    perm.swap(a, b);
                }
                let x = self.t(n, "self")?;
                self.transpose(n, x, perm)
            }
            "expand" | "expand_copy" | "broadcast_to" => {
                let x = self.t(n, "self")?;
                let (_, shape) = self.out_meta(n, 0)?;
                if self.arg_meta(n, "self")?.1 == shape {
                    return self.alias(n, 0, x).map(|()| true);
                }
                let s = self.ints_const(n, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
                self.finish(n, Op::Expand, &[Some(x), Some(s)])
            }
            "slice" | "slice_copy" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", Some(0))?, shape.len())? as i64;
                let start = self.opt_int(n, "start")?.unwrap_or(0);
                let end = self.opt_int(n, "end")?.unwrap_or(i64::MAX);
                let step = self.int(n, "step", Some(1))?;
                if step < 1 {
                    return Err(n.err(format!("step {step}: torch slices with positive steps")));
                }
                let x = self.t(n, "self")?;
                let s = self.ints_const(n, &[start]);
                let e = self.ints_const(n, &[end]);
                let a = self.ints_const(n, &[d]);
                let st = self.ints_const(n, &[step]);
                self.finish(n, Op::Slice, &[Some(x), Some(s), Some(e), Some(a), Some(st)])
            }
            "select" | "select_copy" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())?;
                let i = self.int(n, "index", None)?;
                let x = self.t(n, "self")?;
                let idx = self.konst(n, "index", Tensor::i64(vec![], vec![i]));
                self.finish(n, Op::Gather { axis: d as i64 }, &[Some(x), Some(idx)])
            }
            "cat" | "concat" | "concatenate" => {
                let Some(Argument::AsTensors(ts)) = n.arg("tensors") else {
                    return Err(n.err("argument 'tensors' is not a tensor list"));
                };
                let (out_dt, out_shape) = self.out_meta(n, 0)?;
                let axis = self.dim(n, self.int(n, "dim", Some(0))?, out_shape.len())?;
                let mut inputs = Vec::new();
                for t in ts {
                    let (dt, shape) = self.meta(n, &t.name)?;
                    // torch's legacy rule lets 1-D empty tensors join anything.
                    if shape == [0] && out_shape.len() != 1 {
                        continue;
                    }
                    let v = self.value(n, &t.name)?;
                    inputs.push(Some(self.cast(n, v, dt, out_dt)?));
                }
                self.finish(n, Op::Concat { axis: axis as i64 }, &inputs)
            }
            "split_with_sizes" | "split" | "unbind" | "chunk" | "tensor_split" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let axis = self.dim(n, self.int(n, "dim", Some(0))?, shape.len())?;
                let count = self.output_names(n).len();
                let mut sizes = Vec::new();
                for i in 0..count {
                    let (_, s) = self.out_meta(n, i)?;
                    sizes.push(if base == "unbind" { 1 } else { s.get(axis).copied().unwrap_or(0) as i64 });
                }
                let x = self.t(n, "self")?;
                let sp = self.ints_const(n, &sizes);
                if base == "unbind" {
                    // Each part drops the axis: split, then reshape each to its recorded size.
                    let mut parts = Vec::new();
                    for i in 0..count {
                        parts.push(self.g.add_value(self.g.fresh_name(&format!("{}.part{i}", n.name)), None));
                    }
                    Builder::new(&mut self.g, &n.name)
                        .op_into("split", Op::Split { axis: axis as i64 }, &[Some(x), Some(sp)], parts.clone())
                        .map_err(|e| n.err(e.to_string()))?;
                    for (i, p) in parts.into_iter().enumerate() {
                        self.reshape_to_out(n, p, i, None)?;
                    }
                    return Ok(true);
                }
                self.finish_outputs(n, Op::Split { axis: axis as i64 }, &[Some(x), Some(sp)], count).map(|_| ())
            }
            "repeat_interleave" => {
                // x.repeat_interleave(r, dim): each slice along dim repeated r times in place.
                let (_, shape) = self.arg_meta(n, "self")?;
                let r = match n.arg("repeats") {
                    Some(Argument::AsInt(r)) => *r,
                    _ => return Err(n.err("only an int number of repeats is supported (not a tensor)")),
                };
                let Some(dim) = self.opt_int(n, "dim")? else {
                    return Err(n.err("repeat_interleave without 'dim' (flattening) is not supported"));
                };
                let d = self.dim(n, dim, shape.len())?;
                let mut mid: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
                mid.insert(d + 1, 1);
                let x = self.t(n, "self")?;
                let s = self.ints_const(n, &mid);
                let u = self.emit(n, "insert", Op::Reshape { allowzero: true }, &[Some(x), Some(s)])?;
                mid[d + 1] = r;
                let s = self.ints_const(n, &mid);
                let e = self.emit(n, "expand", Op::Expand, &[Some(u), Some(s)])?;
                self.reshape_to_out(n, e, 0, None)
            }
            "repeat" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let reps = self.ints(n, "repeats", None)?;
                if reps.len() < shape.len() {
                    return Err(n.err("fewer repeats than dims"));
                }
                let x = self.t(n, "self")?;
                let mut padded: Vec<i64> = vec![1; reps.len() - shape.len()];
                padded.extend(shape.iter().map(|&s| s as i64));
                let s = self.ints_const(n, &padded);
                let x = self.emit(n, "rank", Op::Reshape { allowzero: true }, &[Some(x), Some(s)])?;
                let r = self.ints_const(n, &reps);
                self.finish(n, Op::Tile, &[Some(x), Some(r)])
            }
            "constant_pad_nd" | "pad" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                if base == "pad" && self.string(n, "mode")?.is_some_and(|m| m != "constant") {
                    return Err(n.err("only constant padding is supported"));
                }
                let pad = self.ints(n, "pad", None)?;
                let r = shape.len();
                if !pad.len().is_multiple_of(2) || pad.len() / 2 > r {
                    return Err(n.err(format!("pad {pad:?} does not fit rank {r}")));
                }
                // torch lists (begin, end) pairs from the last dim backwards; ONNX all begins, then all ends.
                let mut onnx = vec![0i64; 2 * r];
                for (k, pair) in pad.chunks(2).enumerate() {
                    let d = r - 1 - k;
                    onnx[d] = pair[0];
                    onnx[r + d] = pair[1];
                }
                let value = self.number(n, "value", Some(0.0))?;
                let x = self.t(n, "self")?;
                let p = self.ints_const(n, &onnx);
                let (dt, _) = self.arg_meta(n, "self")?;
                let v = self.scalar(n, dt, value);
                self.finish(
                    n,
                    Op::Pad { mode: wgslc_ir::PadMode::Constant, pads: None, value: 0.0 },
                    &[Some(x), Some(p), Some(v)],
                )
            }
            // ---- constants ----
            "full" | "full_like" | "new_full" => {
                let v = self.number(n, "fill_value", None)?;
                self.constant(n, v)
            }
            "zeros" | "zeros_like" | "new_zeros" | "empty" | "empty_like" | "new_empty" | "empty_strided"
            | "new_empty_strided" => self.constant(n, 0.0),
            "ones" | "ones_like" | "new_ones" => self.constant(n, 1.0),
            "scalar_tensor" => {
                let v = self.number(n, "s", None)?;
                self.constant(n, v)
            }
            "arange" => {
                let (dt, shape) = self.out_meta(n, 0)?;
                let (start, end, step) = match overload {
                    "default" => (0.0, self.number(n, "end", None)?, 1.0),
                    "start" => (self.number(n, "start", None)?, self.number(n, "end", None)?, 1.0),
                    _ => (
                        self.number(n, "start", Some(0.0))?,
                        self.number(n, "end", None)?,
                        self.number(n, "step", Some(1.0))?,
                    ),
                };
                let count = shape.first().copied().unwrap_or(0);
                if step == 0.0 || count > 1 << 26 {
                    return Err(n.err(format!("arange({start}, {end}, {step}) is not a foldable range")));
                }
                let t = Tensor::from_f64(dt, shape, (0..count).map(|i| start + i as f64 * step).collect());
                let v = self.konst(n, "range", t);
                self.alias(n, 0, v)
            }
            _ => return Ok(false),
        };
        done.map(|()| true)
    }

    /// The tensor `x` (of shape `from`, where known) reshaped to the size torch recorded for output `i`.
    pub(super) fn reshape_to_out(&mut self, n: &N, x: ValueId, i: usize, from: Option<Vec<usize>>) -> R<()> {
        let (_, shape) = self.out_meta(n, i)?;
        if let Some((src, src_shape)) = self.origins.get(&x) {
            if *src_shape == shape {
                return self.alias(n, i, *src);
            }
        }
        if from.as_ref() == Some(&shape) {
            return self.alias(n, i, x);
        }
        if let Some(&v) = self.reshapes.get(&(x, shape.clone())) {
            return self.alias(n, i, v);
        }
        let s = self.ints_const(n, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let name = self.out_name(n, i)?;
        let v = self.g.add_value(name.clone(), None);
        self.vals.insert(name, Val::T(v));
        Builder::new(&mut self.g, &n.name)
            .op_into("", Op::Reshape { allowzero: true }, &[Some(x), Some(s)], vec![v])
            .map_err(|e| n.err(e.to_string()))?;
        self.reshapes.insert((x, shape), v);
        if let Some(from) = from {
            self.origins.insert(v, (x, from));
        }
        Ok(())
    }

    /// `x` transposed by `perm` as output 0 of `n`, composed with the transpose that made `x` if one did.
    pub(super) fn transpose(&mut self, n: &N, x: ValueId, perm: Vec<usize>) -> R<()> {
        let (x, perm) = match self.perms.get(&x) {
            Some((src, first)) if first.len() == perm.len() => (*src, perm.iter().map(|&p| first[p]).collect()),
            _ => (x, perm),
        };
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return self.alias(n, 0, x);
        }
        let out = self.finish_outputs(n, Op::Transpose { perm: Some(perm.clone()) }, &[Some(x)], 1)?;
        self.perms.insert(out[0], (x, perm));
        Ok(())
    }

    pub(super) fn constant(&mut self, n: &N, value: f64) -> R<()> {
        let (dt, shape) = self.out_meta(n, 0)?;
        let numel: usize = shape.iter().product();
        if numel > 1 << 26 {
            return Err(n.err(format!("a constant of {numel} elements is too large to fold")));
        }
        let t = Tensor::from_f64(dt, shape, vec![value; numel]);
        let v = self.konst(n, "value", t);
        self.alias(n, 0, v)
    }
}
