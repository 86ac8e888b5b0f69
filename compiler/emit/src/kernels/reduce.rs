//! Reductions along axes: Reduce*, Softmax, LayerNorm/RMSNorm, ArgMax/ArgMin, CumSum, TopK.

use super::*;

pub(super) struct RDim {
    pub(super) div: usize,
    pub(super) extent: usize,
    pub(super) stride: usize,
}

#[derive(Template)]
#[template(path = "reduce.wgsl", escape = "none")]
pub(super) struct ReduceTpl {
    pub(super) h: Header,
    pub(super) ty: &'static str,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) kept: Vec<RDim>,
    pub(super) reduced: Vec<RDim>,
    pub(super) count: usize,
    pub(super) init: String,
    pub(super) prologue: String,
    pub(super) combine_acc_v: String,
    pub(super) combine_a_v: String,
    pub(super) finish: String,
}

#[derive(Template)]
#[template(path = "softmax.wgsl", escape = "none")]
pub(super) struct SoftmaxTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) log: bool,
    pub(super) groups_x: u32,
    pub(super) rows: usize,
    pub(super) n: usize,
    pub(super) inner: usize,
    pub(super) row_span: usize,
    /// The subgroup form ([`super::EmittedKernel::subgroups`]).
    pub(super) sg: bool,
}

#[derive(Template)]
#[template(path = "layernorm.wgsl", escape = "none")]
pub(super) struct LayerNormTpl {
    pub(super) h: Header,
    pub(super) rms: bool,
    pub(super) has_mean: bool,
    pub(super) has_inv: bool,
    pub(super) groups_x: u32,
    pub(super) rows: usize,
    pub(super) n: usize,
    pub(super) n_f: String,
    pub(super) epsilon: String,
    pub(super) scale_len: usize,
    pub(super) has_bias: bool,
    pub(super) bias_len: usize,
    /// The row's elements each thread holds in registers (rows of at most [`LAYERNORM_HELD`] elements), read
    /// once; empty: rows read three times (mean, variance, output).
    pub(super) held: Vec<Held>,
    /// The subgroup form ([`super::EmittedKernel::subgroups`]).
    pub(super) sg: bool,
}

/// Element `lid + off` of a row, which thread `lid` holds as `v{i}`; `partial`: past the row for some threads.
pub(super) struct Held {
    pub(super) i: usize,
    pub(super) off: usize,
    pub(super) partial: bool,
}

/// The longest rows a LayerNormalization holds in registers (32 elements a thread): a row read once instead of
/// three times (GPT-2's 768 and a 0.5B decoder's 896 included).
pub(super) const LAYERNORM_HELD: usize = 2048;

/// The comparison by which an element replaces the best so far in one sequential scan: ties keep the first, or
/// take the last with select_last_index.
fn scan_cmp(max: bool, last: bool) -> &'static str {
    match (max, last) {
        (true, false) => ">",
        (true, true) => ">=",
        (false, false) => "<",
        (false, true) => "<=",
    }
}

#[derive(Template)]
#[template(path = "argreduce.wgsl", escape = "none")]
pub(super) struct ArgReduceTpl {
    pub(super) h: Header,
    pub(super) kind: &'static str,
    pub(super) cmp: &'static str,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) n: usize,
    pub(super) inner: usize,
    pub(super) span: usize,
}

/// ArgChunks and ArgMerge ([`wgslc_ir::Op::ArgChunks`]): a long row's chunks reduced side by side, then merged.
#[derive(Template)]
#[template(path = "argchunks.wgsl", escape = "none")]
pub(super) struct ArgChunksTpl {
    pub(super) h: Header,
    pub(super) kind: &'static str,
    pub(super) cmp: &'static str,
    pub(super) strict: &'static str,
    pub(super) tie: &'static str,
    pub(super) last: bool,
    pub(super) groups_x: u32,
    /// Workgroups: `rows · chunks`.
    pub(super) groups: usize,
    pub(super) rows: usize,
    pub(super) chunks: usize,
    pub(super) n: usize,
    pub(super) chunk: usize,
    /// `n / 4` and `chunk / 4`: the row and a chunk in vec4s.
    pub(super) n4: usize,
    pub(super) chunk4: usize,
    /// The index no element has (a thread without one).
    pub(super) none: u32,
}

#[derive(Template)]
#[template(path = "argmerge.wgsl", escape = "none")]
pub(super) struct ArgMergeTpl {
    pub(super) h: Header,
    pub(super) kind: &'static str,
    pub(super) strict: &'static str,
    pub(super) tie: &'static str,
    pub(super) last: bool,
    pub(super) groups_x: u32,
    pub(super) rows: usize,
    pub(super) chunks: usize,
    pub(super) none: u32,
}

#[derive(Template)]
#[template(path = "argreduce_rows.wgsl", escape = "none")]
pub(super) struct ArgReduceRowsTpl {
    pub(super) h: Header,
    pub(super) kind: &'static str,
    pub(super) ty: &'static str,
    pub(super) cmp: &'static str,
    pub(super) strict: &'static str,
    pub(super) tie: &'static str,
    pub(super) last: bool,
    pub(super) groups_x: u32,
    pub(super) rows: usize,
    pub(super) n: usize,
    pub(super) inner: usize,
    pub(super) span: usize,
    /// The row read four elements per load (`x` bound as vec4s): contiguous rows a multiple of 4 long.
    pub(super) vec4: bool,
    /// `n / 4`: the row's vec4s.
    pub(super) n4: usize,
    /// The eight loads in flight per thread, 256 apart.
    pub(super) loads: Vec<super::Lane>,
}

#[derive(Template)]
#[template(path = "sample_rows.wgsl", escape = "none")]
pub(super) struct SampleTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) rows: usize,
    pub(super) n: usize,
    pub(super) counter_last: usize,
}

#[derive(Template)]
#[template(path = "cumsum.wgsl", escape = "none")]
pub(super) struct CumSumTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) n: usize,
    pub(super) inner: usize,
    pub(super) span: usize,
    pub(super) exclusive: bool,
    pub(super) reverse: bool,
    pub(super) prod: bool,
    pub(super) zero: &'static str,
}

#[derive(Template)]
#[template(path = "topk.wgsl", escape = "none")]
pub(super) struct TopKTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) largest: bool,
    pub(super) cmp: &'static str,
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) inner: usize,
    pub(super) span: usize,
    pub(super) out_span: usize,
}

impl Emitter<'_> {
    pub(super) fn reduce(&self, n: NodeId, op: ReduceOp, axes: &[usize]) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let xt = g.ty(x);
        let cs = contiguous_strides(&xt.shape);
        let dims = |sel: &dyn Fn(usize) -> bool| -> Vec<RDim> {
            let ds: Vec<usize> = (0..xt.rank()).filter(|&d| sel(d)).collect();
            let mut out = Vec::new();
            let mut div = 1;
            for &d in ds.iter().rev() {
                if xt.shape[d] > 1 {
                    out.push(RDim { div, extent: xt.shape[d], stride: cs[d] });
                }
                div *= xt.shape[d];
            }
            out.reverse();
            out
        };
        let kept = dims(&|d| !axes.contains(&d));
        let reduced = dims(&|d| axes.contains(&d));
        let count: usize = axes.iter().map(|&a| xt.shape[a]).product();
        let float = storage(g, x).is_float();
        if storage(g, x) == Storage::U32 {
            // bool: max is "any", min is "all".
            let (init, comb) = match op {
                ReduceOp::Max => ("0u", "max"),
                ReduceOp::Min => ("1u", "min"),
                _ => return Err(self.err(n, "only ReduceMax and ReduceMin take bool inputs")),
            };
            let numel = g.ty(out).numel();
            let b = [(x, false, "x"), (out, true, "out")];
            let (h, wg, groups_x) = self.launch(n, None, "reduce.wgsl", &b, numel)?;
            let tpl = ReduceTpl {
                h,
                ty: "u32",
                groups_x,
                numel,
                kept,
                reduced,
                count,
                init: init.into(),
                prologue: "raw".into(),
                combine_acc_v: format!("{comb}(acc, v)"),
                combine_a_v: format!("{comb}(a, v)"),
                finish: "part[0]".into(),
            };
            return self.kernel(n, node.name.clone(), "reduce", tpl.render(), &b, wg);
        }
        let (init, comb) = match (op, float) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => ("0.0".to_string(), "+"),
            (ReduceOp::Sum | ReduceOp::Mean, false) => ("0i".to_string(), "+"),
            (ReduceOp::Prod, true) => ("1.0".to_string(), "*"),
            (ReduceOp::Prod, false) => ("1i".to_string(), "*"),
            (ReduceOp::Max, true) => (f32_lit(f32::NEG_INFINITY), "max"),
            (ReduceOp::Max, false) => (i32_lit(i32::MIN as i64), "max"),
            (ReduceOp::Min, true) => (f32_lit(f32::INFINITY), "min"),
            (ReduceOp::Min, false) => (i32_lit(i32::MAX as i64), "min"),
            (_, true) => ("0.0".to_string(), "+"),
            (_, false) => ("0i".to_string(), "+"),
        };
        let prologue = match op {
            ReduceOp::SumSquare | ReduceOp::L2 => "raw * raw",
            ReduceOp::L1 => "abs(raw)",
            ReduceOp::LogSumExp if float => "exp(raw)",
            _ => "raw",
        };
        if !float && matches!(op, ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp) {
            return Err(self.err(n, "this reduction needs a float input"));
        }
        let combine = |l: &str, r: &str| {
            if comb.len() == 1 {
                format!("{l} {comb} {r}")
            } else {
                format!("{comb}({l}, {r})")
            }
        };
        let finish = match (op, float) {
            (ReduceOp::Mean, true) => format!("part[0] / {}", f32_lit(count as f32)),
            (ReduceOp::Mean, false) => format!("part[0] / {}", i32_lit(count.max(1) as i64)),
            (ReduceOp::L2, _) => "sqrt(part[0])".to_string(),
            (ReduceOp::LogSum | ReduceOp::LogSumExp, _) => "log(part[0])".to_string(),
            _ => "part[0]".to_string(),
        };
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (h, wg, groups_x) = self.launch(n, None, "reduce.wgsl", &b, numel)?;
        let tpl = ReduceTpl {
            h,
            ty: storage(g, x).wgsl(),
            groups_x,
            numel,
            kept,
            reduced,
            count,
            init,
            prologue: prologue.to_string(),
            combine_acc_v: combine("acc", "v"),
            combine_a_v: combine("a", "v"),
            finish,
        };
        self.kernel(n, node.name.clone(), "reduce", tpl.render(), &b, wg)
    }

    pub(super) fn softmax(
        &self,
        group: &KernelGroup,
        axis: usize,
        legacy: bool,
        log: bool,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (x, sout) = (node.inputs[0].unwrap(), node.outputs[0]);
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> = vec![(storage_root(g, x), "x".into())];
        let fu = self.fused_body(group, Some(sout), &mut reads, &mut helpers)?;
        let shape = &g.ty(x).shape;
        if !storage(g, x).is_float() {
            return Err(self.err(n, "Softmax needs a float input"));
        }
        let outer: usize = shape[..axis.min(shape.len())].iter().product();
        let (len, inner) = if legacy || shape.is_empty() {
            (shape[axis.min(shape.len())..].iter().product::<usize>(), 1)
        } else {
            (shape[axis], shape[axis + 1..].iter().product::<usize>())
        };
        let rows = outer * inner;
        let b = bindings(&reads, &[(out, "out")]);
        let (h, wg, groups_x) = self.launch(n, Some(group), "softmax.wgsl", &b, rows)?;
        let row_span = len * inner;
        let mut tpl =
            SoftmaxTpl { h, helpers, fu, log, groups_x, rows, n: len, inner: inner.max(1), row_span, sg: false };
        let name = self.group_name(group);
        let k = self.kernel(n, name, "softmax", tpl.render(), &b, wg)?;
        tpl.sg = true;
        self.with_subgroups(n, k, tpl.render())
    }

    pub(super) fn layernorm(
        &self,
        n: NodeId,
        axis: usize,
        epsilon: f32,
        rms: bool,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, scale, out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let bias = node.inputs.get(2).copied().flatten();
        let shape = &g.ty(x).shape;
        let len: usize = shape[axis..].iter().product();
        let rows: usize = shape[..axis].iter().product();
        // Scale and bias broadcast over the normalized shape; supported when they cover it whole or are scalars.
        let check = |v: ValueId| -> Result<usize, EmitError> {
            let k = g.ty(v).numel();
            if k == len || k == 1 {
                Ok(k)
            } else {
                Err(self.err(
                    n,
                    format!("scale/bias of shape {:?} broadcast only partly over {:?}", g.ty(v).shape, &shape[axis..]),
                ))
            }
        };
        let scale_len = check(scale)?;
        let bias_len = bias.map(check).transpose()?.unwrap_or(1);
        let mut bindings = vec![(x, false, "x"), (scale, false, "scale")];
        if let Some(bv) = bias {
            bindings.push((bv, false, "bias"));
        }
        bindings.push((out, true, "out"));
        // Optional Mean and InvStdDev outputs (private values when the model does not name them).
        let stats: Vec<Option<ValueId>> = (1..3).map(|i| node.outputs.get(i).copied()).collect();
        if let Some(m) = stats[0] {
            bindings.push((m, true, "mean_out"));
        }
        if let Some(v) = stats[1] {
            bindings.push((v, true, "inv_out"));
        }
        let (h, wg, groups_x) = self.launch(n, None, "layernorm.wgsl", &bindings, rows)?;
        let mut tpl = LayerNormTpl {
            h,
            rms,
            has_mean: stats[0].is_some(),
            has_inv: stats[1].is_some(),
            groups_x,
            rows,
            n: len,
            n_f: f32_lit(len as f32),
            epsilon: f32_lit(epsilon),
            scale_len,
            has_bias: bias.is_some(),
            bias_len,
            held: match len <= LAYERNORM_HELD {
                true => (0..len.div_ceil(64)).map(|i| Held { i, off: 64 * i, partial: 64 * (i + 1) > len }).collect(),
                false => Vec::new(),
            },
            sg: false,
        };
        let k = self.kernel(n, node.name.clone(), "layernorm", tpl.render(), &bindings, wg)?;
        tpl.sg = true;
        self.with_subgroups(n, k, tpl.render())
    }

    pub(super) fn argreduce(&self, n: NodeId, max: bool, axis: usize, last: bool) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let shape = &g.ty(x).shape;
        let inner: usize = shape[axis + 1..].iter().product();
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let cmp = scan_cmp(max, last);
        // A long axis with few outputs (an LLM's next token over its vocabulary): a workgroup per output.
        if shape[axis] >= 1024 && numel <= 4096 {
            let (mut h, wg, groups_x) = self.launch(n, None, "argreduce_rows.wgsl", &b, numel)?;
            let ty = match storage(g, x) {
                Storage::F32 => "f32",
                Storage::I32 => "i32",
                Storage::U32 => "u32",
            };
            let vec4 = inner == 1 && shape[axis].is_multiple_of(4);
            if vec4 {
                for d in h.bindings.iter_mut().filter(|d| d.var == "x") {
                    d.ty = match ty {
                        "f32" => "vec4<f32>",
                        "i32" => "vec4<i32>",
                        _ => "vec4<u32>",
                    };
                }
            }
            let tpl = ArgReduceRowsTpl {
                h,
                kind: if max { "Max" } else { "Min" },
                ty,
                cmp,
                strict: if max { ">" } else { "<" },
                tie: if last { ">" } else { "<" },
                last,
                groups_x,
                rows: numel,
                n: shape[axis],
                inner,
                span: shape[axis] * inner,
                vec4,
                n4: shape[axis] / 4,
                loads: super::unrolled(8, 256),
            };
            return self.kernel(n, node.name.clone(), "argreduce", tpl.render(), &b, wg);
        }
        let (h, wg, groups_x) = self.launch(n, None, "argreduce.wgsl", &b, numel.div_ceil(256))?;
        let tpl = ArgReduceTpl {
            h,
            kind: if max { "Max" } else { "Min" },
            cmp,
            groups_x,
            numel,
            n: shape[axis],
            inner,
            span: shape[axis] * inner,
        };
        self.kernel(n, node.name.clone(), "argreduce", tpl.render(), &b, wg)
    }

    /// The two halves of a split ArgMax / ArgMin (passes' `split_arg_reduces`): `merge` false for ArgChunks.
    pub(super) fn arg_split(&self, n: NodeId, max: bool, last: bool, merge: bool) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let kind = if max { "Max" } else { "Min" };
        let strict = if max { ">" } else { "<" };
        let tie = if last { ">" } else { "<" };
        let none = u32::MAX;
        let b = [(x, false, "x"), (out, true, "out")];
        if merge {
            let (rows, chunks) = (g.ty(out).numel(), g.ty(x).shape[g.ty(x).rank() - 2]);
            if chunks > 256 {
                return Err(self.err(n, format!("{chunks} chunks, more than one workgroup's 256 threads")));
            }
            let (h, wg, groups_x) = self.launch(n, None, "argmerge.wgsl", &b, rows)?;
            let tpl = ArgMergeTpl { h, kind, strict, tie, last, groups_x, rows, chunks, none };
            return self.kernel(n, node.name.clone(), "argreduce", tpl.render(), &b, wg);
        }
        let Op::ArgChunks { chunk, .. } = node.op else { unreachable!("an ArgChunks node") };
        let (xs, os) = (&g.ty(x).shape, &g.ty(out).shape);
        let len = *xs.last().expect("a row");
        let chunks = os[os.len() - 2];
        if len % 4 != 0 || chunk % 4 != 0 || chunk == 0 {
            return Err(self.err(n, format!("rows of {len} in chunks of {chunk}: both must be multiples of 4")));
        }
        let rows = g.ty(x).numel() / len;
        let cmp = scan_cmp(max, last);
        let (mut h, wg, groups_x) = self.launch(n, None, "argchunks.wgsl", &b, rows * chunks)?;
        for d in h.bindings.iter_mut().filter(|d| d.var == "x") {
            d.ty = "vec4<f32>";
        }
        let tpl = ArgChunksTpl {
            h,
            kind,
            cmp,
            strict,
            tie,
            last,
            groups_x,
            groups: rows * chunks,
            rows,
            chunks,
            n: len,
            chunk,
            n4: len / 4,
            chunk4: chunk / 4,
            none,
        };
        self.kernel(n, node.name.clone(), "argreduce", tpl.render(), &b, wg)
    }

    pub(super) fn cumsum(
        &self,
        n: NodeId,
        axis: usize,
        exclusive: bool,
        reverse: bool,
        prod: bool,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let shape = &g.ty(x).shape;
        let inner: usize = shape[axis + 1..].iter().product();
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (h, wg, groups_x) = self.launch(n, None, "cumsum.wgsl", &b, numel.div_ceil(256))?;
        let tpl = CumSumTpl {
            h,
            groups_x,
            numel,
            n: shape[axis],
            inner,
            span: shape[axis] * inner,
            exclusive,
            reverse,
            prod,
            zero: match (storage(g, x).is_float(), prod) {
                (true, false) => "0.0",
                (true, true) => "1.0",
                (false, false) => "0i",
                (false, true) => "1i",
            },
        };
        self.kernel(n, node.name.clone(), "cumsum", tpl.render(), &b, wg)
    }

    /// A token per row of logits (`Op::Sample`): a workgroup per row, as the long-axis ArgMax.
    pub(super) fn sample(&self, n: NodeId) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let input = |i: usize| node.inputs[i].ok_or_else(|| self.err(n, format!("Sample needs input {i}")));
        let (x, t, params, counter, out) = (input(0)?, input(1)?, input(2)?, input(3)?, node.outputs[0]);
        if storage(g, x) != Storage::F32 || storage(g, t) != Storage::F32 {
            return Err(self.err(n, "Sample reads logits and a temperature stored as f32"));
        }
        let rows = g.ty(out).numel();
        let b = [
            (x, false, "x"),
            (t, false, "temperature"),
            (params, false, "params"),
            (counter, false, "counter"),
            (out, true, "out"),
        ];
        let (h, wg, groups_x) = self.launch(n, None, "sample_rows.wgsl", &b, rows)?;
        let tpl = SampleTpl {
            h,
            groups_x,
            rows,
            n: *g.ty(x).shape.last().expect("resolved: rank ≥ 1"),
            counter_last: g.ty(counter).numel() - 1,
        };
        self.kernel(n, node.name.clone(), "sample", tpl.render(), &b, wg)
    }

    pub(super) fn topk(&self, n: NodeId, axis: usize, largest: bool, k: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, vals) = (node.inputs[0].unwrap(), node.outputs[0]);
        // The indices output may be unnamed by the model; it still needs a place to go.
        let idx = node.outputs.get(1).copied().ok_or_else(|| self.err(n, "TopK needs its indices output"))?;
        let shape = &g.ty(x).shape;
        let inner: usize = shape[axis + 1..].iter().product();
        let numel = g.ty(x).numel();
        let b = [(x, false, "x"), (vals, true, "values"), (idx, true, "indices")];
        let (h, wg, groups_x) = self.launch(n, None, "topk.wgsl", &b, numel.div_ceil(256))?;
        let tpl = TopKTpl {
            h,
            groups_x,
            numel,
            largest,
            cmp: if largest { ">" } else { "<" },
            k,
            n: shape[axis],
            inner,
            span: shape[axis] * inner,
            out_span: k * inner,
        };
        self.kernel(n, node.name.clone(), "topk", tpl.render(), &b, wg)
    }
}
