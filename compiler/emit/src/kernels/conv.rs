//! Convolutions: direct (grouped), as implicit GEMM through the product kernel (with a summed shortcut or a
//! folded depthwise), whole inverted-residual blocks, and pooling.

use super::*;

/// A convolution's window over its input, for the implicit-GEMM load: its geometry and the two products the
/// load divides by.
pub(super) struct Im2col {
    pub(super) g: Geometry,
    pub(super) hw: usize,
    pub(super) khw: usize,
}

/// A depthwise convolution computed in a pointwise product's B loads: row k of B is channel k of its output, read
/// from its input (`b_var`) through its window and weights, biased, then passed through `post` (an expression of
/// the sum `s`: the folded scalar epilogue, e.g. ReLU6).
pub(super) struct DwLoad {
    pub(super) win: Im2col,
    pub(super) w_var: String,
    pub(super) bias_var: String,
    pub(super) post: String,
}

/// An expansion → depthwise convolution (→ projection) kernel (`KernelGroup::expand`): `post_e` and `post_d` are the
/// expansion's and the depthwise convolution's scalar epilogues as expressions of `v` and `s`.
#[derive(Template)]
#[template(path = "mbconv.wgsl", escape = "none")]
pub(super) struct MbconvTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) t: wgslc_passes::ExpandTile,
    pub(super) g: Geometry,
    pub(super) cin: usize,
    pub(super) e: usize,
    pub(super) hw: usize,
    pub(super) ohw: usize,
    pub(super) khw: usize,
    pub(super) tiles_x: usize,
    pub(super) we_var: String,
    pub(super) be_var: String,
    pub(super) wd_var: String,
    pub(super) bd_var: String,
    pub(super) post_e: String,
    pub(super) post_d: String,
    pub(super) project: Option<Projection>,
    /// The expansion values each thread computes at once, 256 apart.
    pub(super) us: Vec<Lane>,
    /// Sizes the template writes: the input window's positions (`hy · hx`), the staged input (`x_chunk` channels
    /// of it), the expanded channels' window (`ec` of them) and its last index, the tile's output positions
    /// (`ty · tx`) and their depthwise outputs (`ec` channels), one image's input (`cin · hw`), the window's
    /// row step per output row (`sy · hx`) and per tap row (`dy · hx`), the last expanded channel (`e - 1`) and
    /// last of four (`e - 4`), and the last input channel a vec4 load may start at (`cin - we_step`).
    pub(super) win: usize,
    pub(super) xt_len: usize,
    pub(super) xe_len: usize,
    pub(super) xe_last: usize,
    pub(super) tile_pos: usize,
    pub(super) dv_len: usize,
    pub(super) x_batch: usize,
    pub(super) row_step: usize,
    pub(super) tap_step: usize,
    pub(super) e_last: usize,
    pub(super) e_last4: usize,
    pub(super) cw_last: usize,
    /// Input channels per expansion weight load: 4 where the weights are read as vec4 (`cin` and the staged
    /// slice are multiples of 4), else 1.
    pub(super) we_step: usize,
    /// Trip counts of the loops that index workgroup memory, each counted from 0 by 1 to a constant (the staged
    /// input's 256-thread rounds, the expansion's 1,024-value rounds, its steps over the staged channels, the
    /// depthwise outputs' rounds): Tint's robustness transform, with the integer range analysis Chrome enables,
    /// then proves the indices in bounds and clamps none of them.
    pub(super) xt_iters: usize,
    pub(super) xe_iters: usize,
    pub(super) c_steps: usize,
    pub(super) dv_iters: usize,
    /// The last index of the staged input and of the depthwise outputs, and the projection's steps of four
    /// expanded channels (`ec / 4`).
    pub(super) xt_last: usize,
    pub(super) dv_last: usize,
    pub(super) ec4: usize,
}

/// The projection of a whole inverted-residual block: `qs` numbers each thread's accumulators.
pub(super) struct Projection {
    pub(super) cout: usize,
    pub(super) wp_var: String,
    pub(super) bp_var: String,
    /// Each thread's accumulators: output channel `lane + off` (`lanes` apart).
    pub(super) qs: Vec<Lane>,
    /// The projection weights are read as vec4, four expanded channels at a time.
    pub(super) vec4: bool,
    /// The last output channel, `cout - 1`.
    pub(super) cout_last: usize,
}

/// The second convolution of a conv-sum kernel: rows `k_first..` of the product's K read its weight (A, rows of
/// `a_sm`) and its input (B: im2col, or [C, h·w] itself with row stride `b_sk`; `b_batch` apart per batch).
pub(super) struct Seg2 {
    pub(super) k_first: usize,
    pub(super) a_var: String,
    pub(super) b_var: String,
    pub(super) a_sm: usize,
    pub(super) b_sk: usize,
    pub(super) b_batch: usize,
    pub(super) im2col: Option<Im2col>,
    pub(super) bias_var: String,
}

/// The 2-D geometry shared by convolution and pooling (1-D ops use height 1).
#[derive(Clone, Copy)]
pub(super) struct Geometry {
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) sy: usize,
    pub(super) sx: usize,
    pub(super) dy: usize,
    pub(super) dx: usize,
    pub(super) pt: usize,
    pub(super) pl: usize,
    pub(super) pb: usize,
    pub(super) pr: usize,
}

#[derive(Template)]
#[template(path = "conv2d.wgsl", escape = "none")]
pub(super) struct ConvTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) m: usize,
    pub(super) cg: usize,
    pub(super) m_per_group: usize,
    pub(super) hw: usize,
    pub(super) khw: usize,
    pub(super) ohw: usize,
    pub(super) mohw: usize,
    pub(super) has_bias: bool,
    pub(super) g: Geometry,
}

#[derive(Template)]
#[template(path = "pool2d.wgsl", escape = "none")]
pub(super) struct PoolTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) kind: &'static str,
    pub(super) is_max: bool,
    pub(super) lp: u32,
    pub(super) count_include_pad: bool,
    pub(super) hw: usize,
    pub(super) ohw: usize,
    pub(super) g: Geometry,
}

impl Emitter<'_> {
    pub(super) fn geometry(
        &self,
        n: NodeId,
        x: &[usize],
        out: &[usize],
        w: &wgslc_ir::Window,
    ) -> Result<Geometry, EmitError> {
        match x.len() {
            3 => Ok(Geometry {
                h: 1,
                w: x[2],
                oh: 1,
                ow: out[2],
                kh: 1,
                kw: w.kernel[0],
                sy: 1,
                sx: w.strides[0],
                dy: 1,
                dx: w.dilations[0],
                pt: 0,
                pl: w.pads[0],
                pb: 0,
                pr: w.pads[1],
            }),
            4 => Ok(Geometry {
                h: x[2],
                w: x[3],
                oh: out[2],
                ow: out[3],
                kh: w.kernel[0],
                kw: w.kernel[1],
                sy: w.strides[0],
                sx: w.strides[1],
                dy: w.dilations[0],
                dx: w.dilations[1],
                pt: w.pads[0],
                pl: w.pads[1],
                pb: w.pads[2],
                pr: w.pads[3],
            }),
            r => Err(self.err(n, format!("only 1-D and 2-D windows are supported, not {}-D", r - 2))),
        }
    }

    pub(super) fn conv(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        if group.expand().is_some() {
            return self.mbconv(group);
        }
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let Op::Conv { window, group: conv_groups } = &node.op else { unreachable!() };
        let (x, w, conv_out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let bias = node.inputs.get(2).copied().flatten();
        let (xs, ws, os) = (g.ty(x).shape.clone(), g.ty(w).shape.clone(), g.ty(conv_out).shape.clone());
        let geo = self.geometry(n, &xs, &os, window)?;
        let numel = g.ty(conv_out).numel();
        let out = g.node(group.last()).outputs[0];
        if *conv_groups == 1 || wgslc_passes::grouped_conv_as_product(g, n) {
            return self.conv_gemm(group, geo, xs, ws, *conv_groups);
        }
        let mut helpers = Helpers::default();
        // The epilogue may read the convolution's own input (a residual): one binding serves both.
        let mut reads: Vec<(ValueId, String)> = vec![(storage_root(g, x), "x".into()), (w, "weight".into())];
        if let Some(bv) = bias {
            reads.push((bv, "bias".into()));
        }
        let fu = self.fused_body(group, Some(conv_out), &mut reads, &mut helpers)?;
        let bindings = bindings(&reads, &[(out, "out")]);
        let (h, wg, groups_x) = self.launch(n, Some(group), "conv2d.wgsl", &bindings, numel.div_ceil(256))?;
        let m = ws[0];
        let tpl = ConvTpl {
            h,
            helpers,
            fu,
            groups_x,
            numel,
            n: xs[0],
            c: xs[1],
            m,
            cg: ws[1],
            m_per_group: m / conv_groups,
            hw: geo.h * geo.w,
            khw: geo.kh * geo.kw,
            ohw: geo.oh * geo.ow,
            mohw: m * geo.oh * geo.ow,
            has_bias: bias.is_some(),
            g: geo,
        };
        let name = self.group_name(group);
        self.kernel(n, name, "conv", tpl.render(), &bindings, wg)
    }

    /// A convolution's window as the implicit-GEMM load reads it, or `None` for a 1x1 window with unit strides
    /// and no padding, which reads the input as it lies ([C, h·w] is its own im2col matrix).
    pub(super) fn im2col(geo: &Geometry) -> Option<Im2col> {
        let pointwise = geo.kh * geo.kw == 1 && geo.sy == 1 && geo.sx == 1 && geo.pt + geo.pl + geo.pb + geo.pr == 0;
        (!pointwise).then(|| Self::window(geo))
    }

    /// A convolution's window as the template's loads read it.
    pub(super) fn window(geo: &Geometry) -> Im2col {
        Im2col { g: *geo, hw: geo.h * geo.w, khw: geo.kh * geo.kw }
    }

    /// A convolution as a product (implicit GEMM) through the matmul template: the weight is A [M, C·kh·kw], the
    /// input's im2col matrix B [C·kh·kw, oh·ow] is gathered as tiles are loaded, the batch is the product's batch,
    /// and the output [N, M, oh, ow] is the product's row-major output. A grouped one
    /// ([`wgslc_passes::grouped_conv_as_product`]) is one product per image and group: group `j`'s M / groups rows
    /// of A, its C / groups channels of the input, its block of output channels (and of the bias). A summed second
    /// convolution (`conv_sum`) continues A and B along K.
    pub(super) fn conv_gemm(
        &self,
        group: &KernelGroup,
        geo: Geometry,
        xs: Vec<usize>,
        ws: Vec<usize>,
        groups: usize,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (x, w, conv_out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let bias = node.inputs.get(2).copied().flatten();
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> = vec![(w, "a".into())];
        // A folded depthwise convolution: B is computed from its input, which the kernel binds instead.
        let dw_node = group.depthwise().map(|d| g.node(d.conv));
        let b_var = bind_once(&mut reads, dw_node.map_or(x, |d| d.inputs[0].expect("input")), "b");
        let bias_var = bias.map(|c| bind_once(&mut reads, c, "bias")).unwrap_or_default();
        let (images, m, p) = (xs[0], ws[0] / groups, geo.oh * geo.ow);
        let batches = images * groups;
        let hw = geo.h * geo.w;
        let mut b_batch = xs[1] * hw;
        let dw = match group.depthwise() {
            Some(d) => {
                let dn = g.node(d.conv);
                let Op::Conv { window, .. } = &dn.op else { unreachable!() };
                let dxs = g.ty(dn.inputs[0].expect("input")).shape.clone();
                let dgeo = self.geometry(d.conv, &dxs, &g.ty(dn.outputs[0]).shape, window)?;
                let mut post = "s".to_string();
                for &e in &d.then {
                    post = self.scalar_expr(e, &post, &mut helpers)?;
                }
                b_batch = dxs[1] * dgeo.h * dgeo.w;
                Some(DwLoad {
                    w_var: bind_once(&mut reads, dn.inputs[1].expect("weight"), "dw_w"),
                    bias_var: dn
                        .inputs
                        .get(2)
                        .copied()
                        .flatten()
                        .map(|c| bind_once(&mut reads, c, "dw_b"))
                        .unwrap_or_default(),
                    win: Self::window(&dgeo),
                    post,
                })
            }
            None => None,
        };
        let mut k = ws[1] * geo.kh * geo.kw;
        let seg2 = match group.conv_sum() {
            Some((c1, _)) => {
                let n1 = g.node(c1);
                let (x1, w1) = (n1.inputs[0].unwrap(), n1.inputs[1].unwrap());
                let Op::Conv { window, .. } = &n1.op else { unreachable!() };
                let (xs1, ws1) = (g.ty(x1).shape.clone(), g.ty(w1).shape.clone());
                let geo1 = self.geometry(c1, &xs1, &g.ty(n1.outputs[0]).shape, window)?;
                let k1 = ws1[1] * geo1.kh * geo1.kw;
                let seg = Seg2 {
                    k_first: k,
                    a_var: bind_once(&mut reads, w1, "a2"),
                    b_var: bind_once(&mut reads, x1, "b2"),
                    a_sm: k1,
                    b_sk: geo1.h * geo1.w,
                    b_batch: xs1[1] * geo1.h * geo1.w,
                    im2col: Self::im2col(&geo1),
                    bias_var: n1
                        .inputs
                        .get(2)
                        .copied()
                        .flatten()
                        .map(|c| bind_once(&mut reads, c, "bias2"))
                        .unwrap_or_default(),
                };
                k += k1;
                Some(seg)
            }
            None => None,
        };
        let fu = self.fused_body(group, Some(conv_out), &mut reads, &mut helpers)?;
        let bindings = bindings(&reads, &[(out, "out")]);
        let t = self.product_tiling(group, n, k)?;
        let (gx, gy) = (p.div_ceil(t.tile), m.div_ceil(t.tile));
        let max = self.limits.max_workgroups_per_dimension as usize;
        if gx > max || gy > max || batches > max {
            return Err(
                self.err(n, format!("a {m}x{p} convolution product needs more than {max} workgroups per dimension"))
            );
        }
        let h = self.group_header(group, "matmul.wgsl", &bindings);
        let tpl = MatmulTpl {
            h,
            helpers,
            fu,
            a_off: 0,
            b_off: 0,
            a_ld: Ld::of(g, w, "a"),
            b_ld: Ld::plain(&b_var),
            bias_ld: bias.map_or(Ld::plain(""), |c| Ld::of(g, c, &bias_var)),
            b_var,
            a_pro: String::new(),
            b_pro: String::new(),
            t,
            im2col: Self::im2col(&geo),
            seg2,
            dw,
            rms: None,
            a_mmajor: false,
            b_kmajor: false,
            a4: false,
            b4: false,
            a_ld4: Ld::plain(""),
            b_ld4: Ld::plain(""),
            a_put_step: 0,
            b_put_step: 0,
            a_puts: Vec::new(),
            b_puts: Vec::new(),
            // The batch is image · groups + group: an image's groups are its blocks of output channels.
            batch: [
                BatchDim { div: groups, extent: images, a_stride: 0, b_stride: b_batch as i64 },
                BatchDim {
                    div: 1,
                    extent: groups,
                    a_stride: (m * ws[1] * geo.kh * geo.kw) as i64,
                    b_stride: (ws[1] * hw) as i64,
                },
            ]
            .into_iter()
            .filter(|d| d.extent > 1)
            .collect(),
            bias_groups: (groups > 1).then_some((groups, m)),
            m,
            n: p,
            k,
            mn: m * p,
            a_sm: ws[1] * geo.kh * geo.kw,
            a_sk: 1,
            b_sk: hw,
            b_sn: 1,
            alpha: f32_lit(1.0),
            beta: f32_lit(1.0),
            has_bias: bias.is_some(),
            bias_sm: 1,
            bias_sn: 0,
        };
        let name = self.group_name(group);
        self.kernel(n, name, "conv", tpl.render(), &bindings, [gx as u32, gy as u32, batches as u32])
    }

    /// An expansion → depthwise convolution, or a whole expansion → depthwise → projection block, in one kernel
    /// (`KernelGroup::expand`, tiled by `expand_tile`): the expansion's input is the only activation it reads.
    pub(super) fn mbconv(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let anchor = group.anchor.expect("anchor");
        let ex = group.expand().expect("expansion");
        let (dw, project) = match group.depthwise() {
            Some(d) => (d, Some(anchor)),
            None => (&FoldedConv { conv: anchor, then: vec![] }, None),
        };
        let (en, dn) = (g.node(ex.conv), g.node(dw.conv));
        let x = en.inputs[0].expect("input");
        let (xs, e) = (g.ty(x).shape.clone(), g.ty(en.outputs[0]).shape[1]);
        if !storage(g, x).is_float() {
            return Err(self.err(ex.conv, "a folded expansion needs a float input"));
        }
        let Op::Conv { window, .. } = &dn.op else { unreachable!() };
        let dout = dn.outputs[0];
        let geo = self.geometry(dw.conv, &g.ty(dn.inputs[0].expect("input")).shape, &g.ty(dout).shape, window)?;
        let cout = project.map(|p| g.ty(g.node(p).outputs[0]).shape[1]);
        let t = group
            .recipe
            .expand
            .ok_or_else(|| self.err(anchor, "a folded expansion without its tile (a scheduler bug)"))?;
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> = vec![(x, "x".into())];
        let weights = |n: &wgslc_ir::Node, w: &str, b: &str, reads: &mut Vec<(ValueId, String)>| {
            let wv = bind_once(reads, n.inputs[1].expect("weight"), w);
            let bv = n.inputs.get(2).copied().flatten().map(|c| bind_once(reads, c, b)).unwrap_or_default();
            (wv, bv)
        };
        let (we_var, be_var) = weights(en, "we", "be", &mut reads);
        let (wd_var, bd_var) = weights(dn, "wd", "bd", &mut reads);
        let projection = match project {
            Some(p) => {
                let (wp_var, bp_var) = weights(g.node(p), "wp", "bp", &mut reads);
                let cout = cout.expect("projection");
                let vec4 = e % 4 == 0 && t.ec % 4 == 0;
                let qs = unrolled(t.per_lane, t.lanes);
                Some(Projection { cout, wp_var, bp_var, qs, vec4, cout_last: cout.saturating_sub(1) })
            }
            None => None,
        };
        let chain = |f: &FoldedConv, x: &str, helpers: &mut Helpers| -> Result<String, EmitError> {
            f.then.iter().try_fold(x.to_string(), |acc, &n| self.scalar_expr(n, &acc, helpers))
        };
        let post_e = chain(ex, "v", &mut helpers)?;
        let post_d = chain(dw, "s", &mut helpers)?;
        let anchor_out = g.node(anchor).outputs[0];
        let fu = self.fused_body(group, Some(anchor_out), &mut reads, &mut helpers)?;
        let mut bindings: Vec<(ValueId, bool, &str)> = reads.iter().map(|(v, s)| (*v, false, s.as_str())).collect();
        let out = g.node(group.last()).outputs[0];
        bindings.push((out, true, "out"));
        let tiles_x = geo.ow.div_ceil(t.tx);
        let tiles = geo.oh.div_ceil(t.ty) * tiles_x;
        let chunks = if project.is_some() { 1 } else { e.div_ceil(t.ec) };
        let max = self.limits.max_workgroups_per_dimension as usize;
        if tiles > max || chunks > max || xs[0] > max {
            return Err(self.err(anchor, format!("{tiles} tiles need more than {max} workgroups per dimension")));
        }
        let mut h = self.group_header(group, "mbconv.wgsl", &bindings);
        let we_step = if xs[1] % 4 == 0 && t.x_chunk % 4 == 0 { 4 } else { 1 };
        // Weights read four floats at a time are bound as vec4 arrays (their offsets are 256-byte aligned and
        // their lengths multiples of 16 bytes).
        for b in &mut h.bindings {
            let vec4 =
                (we_step == 4 && b.var == we_var) || projection.as_ref().is_some_and(|p| p.vec4 && b.var == p.wp_var);
            if vec4 {
                b.ty = "vec4<f32>";
            }
        }
        let tpl = MbconvTpl {
            h,
            helpers,
            fu,
            t,
            g: geo,
            cin: xs[1],
            e,
            hw: xs[2] * xs[3],
            ohw: geo.oh * geo.ow,
            khw: geo.kh * geo.kw,
            tiles_x,
            we_var,
            be_var,
            wd_var,
            bd_var,
            post_e,
            post_d,
            project: projection,
            us: unrolled(4, 256),
            win: t.hy * t.hx,
            xt_len: t.x_chunk * t.hy * t.hx,
            xe_len: t.ec * t.hy * t.hx,
            xe_last: (t.ec * t.hy * t.hx).saturating_sub(1),
            tile_pos: t.ty * t.tx,
            dv_len: t.ec * t.ty * t.tx,
            x_batch: xs[1] * xs[2] * xs[3],
            row_step: geo.sy * t.hx,
            tap_step: geo.dy * t.hx,
            e_last: e.saturating_sub(1),
            e_last4: e.saturating_sub(4),
            cw_last: xs[1].saturating_sub(we_step),
            we_step,
            xt_iters: (t.x_chunk * t.hy * t.hx).div_ceil(256),
            xe_iters: (t.ec * t.hy * t.hx).div_ceil(1024),
            c_steps: t.x_chunk / we_step,
            dv_iters: (t.ec * t.ty * t.tx).div_ceil(256),
            xt_last: (t.x_chunk * t.hy * t.hx).saturating_sub(1),
            dv_last: (t.ec * t.ty * t.tx).saturating_sub(1),
            ec4: t.ec / 4,
        };
        let name = self.group_name(group);
        self.kernel(anchor, name, "conv", tpl.render(), &bindings, [tiles as u32, chunks as u32, xs[0] as u32])
    }

    pub(super) fn pool(&self, n: NodeId) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let Op::Pool { kind, window, count_include_pad } = &node.op else { unreachable!() };
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let (xs, os) = (g.ty(x).shape.clone(), g.ty(out).shape.clone());
        if !storage(g, x).is_float() {
            return Err(self.err(n, "pooling needs a float input"));
        }
        let geo = self.geometry(n, &xs, &os, window)?;
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (h, wg, groups_x) = self.launch(n, None, "pool2d.wgsl", &b, numel.div_ceil(256))?;
        let tpl = PoolTpl {
            h,
            groups_x,
            numel,
            kind: match kind {
                PoolKind::Max => "max",
                PoolKind::Avg => "average",
                PoolKind::Lp(_) => "Lp",
            },
            is_max: *kind == PoolKind::Max,
            lp: if let PoolKind::Lp(p) = kind { *p } else { 0 },
            count_include_pad: *count_include_pad,
            hw: geo.h * geo.w,
            ohw: geo.oh * geo.ow,
            g: geo,
        };
        self.kernel(n, node.name.clone(), "pool", tpl.render(), &b, wg)
    }
}
