//! Data-dependent indexing: GatherElements, ScatterND/ScatterElements, Pad.

use super::*;

#[derive(Template)]
#[template(path = "gather_elements.wgsl", escape = "none")]
pub(super) struct GatherElementsTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) axis: usize,
    pub(super) coords: Vec<Coord>,
    pub(super) terms: Vec<Term>,
    pub(super) axis_len: usize,
    pub(super) axis_stride: usize,
}

pub(super) struct ScatterDim {
    pub(super) extent: usize,
    pub(super) stride: usize,
}

pub(super) struct UpdCoord {
    pub(super) coord: usize,
    pub(super) stride: usize,
    pub(super) extent: usize,
}

#[derive(Template)]
#[template(path = "scatter.wgsl", escape = "none")]
pub(super) struct ScatterTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) kind: &'static str,
    pub(super) reduction: &'static str,
    pub(super) nd: bool,
    pub(super) combine: String,
    pub(super) combine_w: String,
    // ScatterND
    pub(super) tuples: usize,
    pub(super) depth: usize,
    pub(super) slice: usize,
    pub(super) dims: Vec<ScatterDim>,
    // ScatterElements
    pub(super) axis: usize,
    pub(super) axis_len: usize,
    pub(super) updates_len: usize,
    pub(super) out_coords: Vec<Coord>,
    pub(super) upd_coords: Vec<UpdCoord>,
}

#[derive(Template)]
#[template(path = "cache_write.wgsl", escape = "none")]
pub(super) struct CacheWriteTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    /// The first part's new rows computed here as they are loaded (`Fold::RowOperand`).
    pub(super) operand: Option<Fused>,
    pub(super) groups_x: u32,
    /// New elements of all parts.
    pub(super) numel: usize,
    pub(super) row_var: String,
    /// The cache writes, their elements one after the other (a second one: `Fold::CacheWrite`).
    pub(super) parts: Vec<CachePart>,
}

pub(super) struct CachePart {
    /// The cache's binding.
    pub(super) cache: String,
    /// Its elements are the kernel's `first .. end` (`end = first + numel`).
    pub(super) first: usize,
    pub(super) numel: usize,
    pub(super) end: usize,
    pub(super) bytes: u64,
    pub(super) axis: usize,
    /// The largest first row: the cache's length along the axis less the new rows'.
    pub(super) last_row: usize,
    pub(super) coords: Vec<NamedCoord>,
    /// New element `i` (of this part): read through the view of the new rows or computed; and where it goes.
    pub(super) src: String,
    pub(super) dst: String,
}

pub(super) struct PadDim {
    pub(super) out_stride: usize,
    pub(super) out_extent: usize,
    pub(super) begin: i64,
    pub(super) extent: usize,
    pub(super) stride: usize,
}

#[derive(Template)]
#[template(path = "pad.wgsl", escape = "none")]
pub(super) struct PadTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) mode: &'static str,
    pub(super) dims: Vec<PadDim>,
    pub(super) value: String,
}

impl Emitter<'_> {
    pub(super) fn gather_elements(&self, n: NodeId, axis: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (data, ind, out) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let (ds, os) = (g.ty(data).shape.clone(), g.ty(out).shape.clone());
        let dcs = contiguous_strides(&ds);
        let ocs = contiguous_strides(&os);
        let coords = os.iter().zip(&ocs).map(|(&e, &s)| Coord { stride: s, extent: e.max(1) }).collect();
        let terms = (0..os.len())
            .filter(|&d| d != axis && os[d] > 1)
            .map(|d| Term { coord: d, stride: dcs[d] as i64 })
            .collect();
        let numel = g.ty(out).numel();
        let b = [(data, false, "data"), (ind, false, "indices"), (out, true, "out")];
        let (h, wg, groups_x) = self.launch(n, None, "gather_elements.wgsl", &b, numel.div_ceil(256))?;
        let tpl =
            GatherElementsTpl { h, groups_x, numel, axis, coords, terms, axis_len: ds[axis], axis_stride: dcs[axis] };
        self.kernel(n, node.name.clone(), "gather_elements", tpl.render(), &b, wg)
    }

    pub(super) fn scatter(
        &self,
        n: NodeId,
        axis: Option<usize>,
        reduction: wgslc_ir::ScatterReduction,
    ) -> Result<EmittedKernel, EmitError> {
        use wgslc_ir::ScatterReduction as R;
        let g = self.g;
        let node = g.node(n);
        let (data, ind, upd, out) =
            (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.inputs[2].unwrap(), node.outputs[0]);
        let (ds, is, us) = (g.ty(data).shape.clone(), g.ty(ind).shape.clone(), g.ty(upd).shape.clone());
        let dcs = contiguous_strides(&ds);
        let combine = |w: &str| match reduction {
            R::None => w.to_string(),
            R::Add => format!("v + {w}"),
            R::Mul => format!("v * {w}"),
            R::Max => format!("max(v, {w})"),
            R::Min => format!("min(v, {w})"),
        };
        let numel = g.ty(out).numel();
        let b = [(data, false, "data"), (ind, false, "indices"), (upd, false, "updates"), (out, true, "out")];
        let (h, wg, groups_x) = self.launch(n, None, "scatter.wgsl", &b, numel.div_ceil(256))?;
        let reduction_name = match reduction {
            R::None => "none",
            R::Add => "add",
            R::Mul => "mul",
            R::Max => "max",
            R::Min => "min",
        };
        let tpl = match axis {
            None => {
                let depth = *is.last().unwrap();
                let slice: usize = ds[depth..].iter().product();
                ScatterTpl {
                    h,
                    groups_x,
                    numel,
                    kind: "ScatterND",
                    reduction: reduction_name,
                    nd: true,
                    combine: combine("u"),
                    combine_w: String::new(),
                    tuples: is[..is.len() - 1].iter().product(),
                    depth,
                    slice,
                    dims: (0..depth).map(|d| ScatterDim { extent: ds[d], stride: dcs[d] }).collect(),
                    axis: 0,
                    axis_len: 0,
                    updates_len: 0,
                    out_coords: vec![],
                    upd_coords: vec![],
                }
            }
            Some(axis) => {
                let ucs = contiguous_strides(&us);
                ScatterTpl {
                    h,
                    groups_x,
                    numel,
                    kind: "ScatterElements",
                    reduction: reduction_name,
                    nd: false,
                    combine: String::new(),
                    combine_w: combine("w"),
                    tuples: 0,
                    depth: 0,
                    slice: 0,
                    dims: vec![],
                    axis,
                    axis_len: ds[axis],
                    updates_len: us.iter().product(),
                    out_coords: ds.iter().zip(&dcs).map(|(&e, &s)| Coord { stride: s, extent: e.max(1) }).collect(),
                    upd_coords: (0..us.len())
                        .filter(|&d| d != axis)
                        .map(|d| UpdCoord { coord: d, stride: ucs[d], extent: us[d].max(1) })
                        .collect(),
                }
            }
        };
        self.kernel(n, node.name.clone(), "scatter", tpl.render(), &b, wg)
    }

    /// The new rows of a cache written in place (`Op::CacheWrite`): one thread per new element, read through its
    /// view (a slice of a merged projection needs no copy of its own) or computed by the elementwise kernel
    /// folded in (`Fold::RowOperand`: rotary on K), stored at its row past the clamped first row.
    pub(super) fn cache_write(&self, group: &KernelGroup, axis: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("an anchored group");
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> = vec![];
        let operand = match group.row_operand() {
            Some(nodes) => Some(self.row_operand(nodes, &mut reads, &mut helpers)?),
            None => None,
        };
        let row = g.node(n).inputs[2].unwrap();
        let row_var = bind_once(&mut reads, row, "row");
        let mut parts = vec![self.cache_part(n, axis, 0, operand.as_ref().map(|o| o.name), &mut reads)?];
        let mut outs = vec![(g.node(n).outputs[0], "cache".to_string())];
        if let Some(m) = group.second_cache_write() {
            let Op::CacheWrite { axis } = g.node(m).op else { unreachable!("a cache write fold") };
            if g.node(m).inputs[2] != Some(row) {
                return Err(self.err(m, "a second cache write at another row (a scheduler bug)"));
            }
            let mut part = self.cache_part(m, axis, 1, None, &mut reads)?;
            part.first = parts[0].numel;
            part.end = part.first + part.numel;
            parts.push(part);
            outs.push((g.node(m).outputs[0], "cache1".to_string()));
        }
        let outs: Vec<(ValueId, &str)> = outs.iter().map(|(v, s)| (*v, s.as_str())).collect();
        let bindings = bindings(&reads, &outs);
        let numel = parts.iter().map(|p| p.numel).sum::<usize>();
        let (h, wg, groups_x) = self.launch(n, Some(group), "cache_write.wgsl", &bindings, numel.div_ceil(256))?;
        let stored = parts.iter().map(|p| p.bytes).sum::<u64>();
        let tpl = CacheWriteTpl { h, helpers, operand, groups_x, numel, row_var, parts };
        let mut k = self.kernel(n, self.group_name(group), "cache_write", tpl.render(), &bindings, wg)?;
        k.stored_bytes = Some(stored);
        Ok(k)
    }

    /// One cache write's share of a cache-write kernel: its new elements after `first` (the earlier parts'),
    /// read through the view of its new rows or computed (`operand`), stored into `cache{index}` (no suffix for 0).
    pub(super) fn cache_part(
        &self,
        n: NodeId,
        axis: usize,
        index: usize,
        operand: Option<&str>,
        reads: &mut Vec<(ValueId, String)>,
    ) -> Result<CachePart, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (new, out) = (node.inputs[1].unwrap(), node.outputs[0]);
        let (ns, cs) = (g.ty(new).shape.clone(), g.ty(out).shape.clone());
        if cs.len() != ns.len() || axis >= cs.len() || cs[axis] < ns[axis] {
            return Err(self.err(n, "new rows that do not fit the cache"));
        }
        let (ncs, ocs) = (contiguous_strides(&ns), contiguous_strides(&cs));
        let dims: Vec<usize> = (0..ns.len()).filter(|&d| ns[d] > 1).collect();
        let coords =
            dims.iter().map(|&d| NamedCoord { name: format!("c{d}"), stride: ncs[d], extent: ns[d] }).collect();
        let dst = dims.iter().fold(format!("r * {}u", ocs[axis]), |e, &d| e + &format!(" + c{d} * {}u", ocs[d]));
        let src = if let Some(f) = operand {
            format!("{f}(0.0, i)")
        } else {
            let view = input_view(g, &self.sched.folded, n, 1);
            let x = bind_once(reads, view.root, "x");
            let at = dims
                .iter()
                .filter(|&&d| view.strides[d] != 0)
                .fold(view.offset.to_string(), |e, &d| e + &format!(" + i32(c{d}) * {}", view.strides[d]));
            format!("{x}[u32({at})]")
        };
        Ok(CachePart {
            cache: if index == 0 { "cache".into() } else { format!("cache{index}") },
            first: 0,
            numel: g.ty(new).numel(),
            end: g.ty(new).numel(),
            bytes: wgslc_passes::stored_bytes(g, new),
            axis,
            last_row: cs[axis] - ns[axis],
            coords,
            src,
            dst,
        })
    }

    pub(super) fn pad(
        &self,
        n: NodeId,
        mode: wgslc_ir::PadMode,
        pads: &[i64],
        value: f32,
    ) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (x, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let (xs, os) = (g.ty(x).shape.clone(), g.ty(out).shape.clone());
        let (xcs, ocs) = (contiguous_strides(&xs), contiguous_strides(&os));
        let r = xs.len();
        let dims = (0..r)
            .map(|d| PadDim {
                out_stride: ocs[d],
                out_extent: os[d].max(1),
                begin: pads[d],
                extent: xs[d],
                stride: xcs[d],
            })
            .collect();
        let value = match storage(g, x) {
            Storage::F32 => f32_lit(value),
            Storage::I32 => i32_lit(value as i64),
            Storage::U32 => format!("{}u", (value != 0.0) as u32),
        };
        let numel = g.ty(out).numel();
        let b = [(x, false, "x"), (out, true, "out")];
        let (h, wg, groups_x) = self.launch(n, None, "pad.wgsl", &b, numel.div_ceil(256))?;
        let mode = match mode {
            wgslc_ir::PadMode::Constant => "constant",
            wgslc_ir::PadMode::Reflect => "reflect",
            wgslc_ir::PadMode::Edge => "edge",
            wgslc_ir::PadMode::Wrap => "wrap",
        };
        let tpl = PadTpl { h, groups_x, numel, mode, dims, value };
        self.kernel(n, node.name.clone(), "pad", tpl.render(), &b, wg)
    }
}
