//! Elementwise kernels: a fused chain of pointwise nodes over one output, Concat (one copy kernel per
//! input) and Gather (with an epilogue).

use super::*;

/// What makes two loads the same: buffer, offset and (coordinate, stride, modulo) terms.
type LoadKey = (ValueId, String, Vec<(usize, i64, usize)>);

#[derive(Template)]
#[template(path = "elementwise.wgsl", escape = "none")]
pub(super) struct ElementwiseTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) store_coords: Vec<Coord>,
    pub(super) store: Index,
}

#[derive(Template)]
#[template(path = "gather.wgsl", escape = "none")]
pub(super) struct GatherTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) fu: Fused,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) positions: usize,
    pub(super) inner: usize,
    pub(super) positions_inner: usize,
    pub(super) axis_len: usize,
    pub(super) data_ld: Ld,
}

/// An embedding lookup over a table in blocks ([`wgslc_ir::Op::GatherBlocks`]).
#[derive(Template)]
#[template(path = "gather_blocks.wgsl", escape = "none")]
pub(super) struct GatherBlocksTpl {
    pub(super) h: Header,
    pub(super) groups_x: u32,
    pub(super) numel: usize,
    pub(super) inner: usize,
    pub(super) rows: usize,
    /// The table's rows, all blocks together.
    pub(super) axis_len: usize,
    /// How each block is read.
    pub(super) blocks: Vec<Ld>,
}

impl Emitter<'_> {
    /// A kernel of elementwise nodes only: `out[store_at(i)] = fused(0, i)` over the result's elements.
    pub(super) fn elementwise_group(&self, group: &KernelGroup) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let last = group.last();
        let out = g.node(last).outputs[0];
        let numel = g.ty(g.node(group.result()).outputs[0]).numel();
        let mut reads = Vec::new();
        // Written in place: that input is read through the output's binding (the same memory).
        let in_place = self.plan.in_place.get(&wgslc_passes::storage_root(g, out)).copied();
        if let Some(src) = in_place {
            reads.push((src, "out".to_string()));
        }
        let mut helpers = Helpers::default();
        let fu = self.fused_body(group, None, &mut reads, &mut helpers)?;
        let mut b: Vec<(ValueId, bool, &str)> =
            reads.iter().filter(|(v, _)| Some(*v) != in_place).map(|(v, s)| (*v, false, s.as_str())).collect();
        b.push((out, true, "out"));
        let (h, wg, groups_x) = self.launch(last, Some(group), "elementwise.wgsl", &b, numel.div_ceil(256))?;
        let tpl = ElementwiseTpl {
            h,
            helpers,
            groups_x,
            numel,
            store_coords: vec![],
            store: Index { offset: fu.at("i"), terms: vec![] },
            fu,
        };
        let name = self.group_name(group);
        self.kernel(last, name, "elementwise", tpl.render(), &b, wg)
    }

    /// The elementwise nodes of a [`wgslc_passes::Fold::RowOperand`] as an `operand_a(acc, i)` function that
    /// computes the element at flat index `i` of their result (the value the kernel would otherwise load).
    pub(super) fn row_operand(
        &self,
        nodes: &[NodeId],
        reads: &mut Vec<(ValueId, String)>,
        helpers: &mut Helpers,
    ) -> Result<Fused, EmitError> {
        let chain =
            KernelGroup { anchor: None, folds: vec![], elementwise: nodes.to_vec(), recipe: Default::default() };
        Ok(Fused { name: "operand_a", ..self.fused_body(&chain, None, reads, helpers)? })
    }

    /// Builds `fused(acc, i)` for a group's elementwise nodes. `i` is the flat index of the group's output; every
    /// member has that many elements in the same contiguous order (reshapes between members keep it), so each
    /// member's coordinates are derived from `i` over its own shape. `acc` stands for `anchor_out`; every other
    /// input is loaded through its composed view, binding each distinct buffer once (`reads` collects them as
    /// `in0`, `in1`, …).
    pub(super) fn fused_body(
        &self,
        group: &KernelGroup,
        anchor_out: Option<ValueId>,
        reads: &mut Vec<(ValueId, String)>,
        helpers: &mut Helpers,
    ) -> Result<Fused, EmitError> {
        let g = self.g;
        if group.elementwise.is_empty() {
            let mut fu = Fused::default();
            self.place_stores(group, &mut fu);
            return Ok(fu);
        }
        let last = group.result();
        let mut exprs: std::collections::HashMap<ValueId, String> = std::collections::HashMap::new();
        if let Some(a) = anchor_out {
            exprs.insert(a, "acc".into());
        }
        // A summed convolution's Add is already in the accumulator.
        let summed = group.conv_sum().map(|(_, add)| add);
        if let Some(add) = summed {
            exprs.insert(g.node(add).outputs[0], "acc".into());
        }
        // Values inside the group are found through the reshapes (aliases) between members.
        let lookup = |exprs: &std::collections::HashMap<ValueId, String>, mut v: ValueId| -> Option<String> {
            loop {
                if let Some(e) = exprs.get(&v) {
                    return Some(e.clone());
                }
                match g.value(v).producer {
                    Some(p) if g.node(p).op == Op::Alias => v = g.node(p).inputs[0].expect("alias input"),
                    _ => return None,
                }
            }
        };
        let mut shapes: Vec<Vec<usize>> = Vec::new();
        let mut used_shapes: Vec<bool> = Vec::new();
        let mut loads: Vec<FusedLoad> = Vec::new();
        let mut load_keys: Vec<LoadKey> = Vec::new();
        let mut stmts = Vec::new();
        for (j, &n) in group.elementwise.iter().enumerate() {
            if Some(n) == summed {
                continue;
            }
            let node = g.node(n);
            let shape = g.ty(node.outputs[0]).shape.clone();
            let sid = match shapes.iter().position(|s| *s == shape) {
                Some(p) => p,
                None => {
                    shapes.push(shape.clone());
                    used_shapes.push(false);
                    shapes.len() - 1
                }
            };
            let cname = |d: usize| Namer::coord(sid, d);
            let contiguous: Vec<i64> = contiguous_strides(&shape).iter().map(|&s| s as i64).collect();
            if node.op == Op::RotateHalf {
                // One load at the rotated coordinate (j + h) mod 2h of the last axis, negated in the first half.
                let v = node.inputs[0].expect("input");
                if lookup(&exprs, v).is_some() {
                    return Err(self.err(n, "RotateHalf reads a value computed in its own kernel (a scheduler bug)"));
                }
                let view = input_view(g, &self.sched.folded, n, 0);
                let fresh = Namer::binding(reads.len());
                let var = bind_once(reads, view.root, &fresh);
                let r = shape.len();
                let w = shape[r - 1];
                let terms: Vec<NamedTerm> = (0..r)
                    .filter(|&d| view.strides[d] != 0 && shape[d] > 1)
                    .map(|d| {
                        let (coord, modulo) =
                            if d == r - 1 { (format!("({} + {})", cname(d), w / 2), w) } else { (cname(d), 0) };
                        NamedTerm { coord, stride: view.strides[d], modulo }
                    })
                    .collect();
                used_shapes[sid] = true;
                let name = Namer::load(loads.len());
                let ld = Ld::of(g, view.root, &var);
                loads.push(FusedLoad { name: name.clone(), var, ld, offset: view.offset.to_string(), terms });
                // A key no other load shares.
                load_keys.push((view.root, format!("{sid}:rotate_half:{n:?}"), vec![]));
                let expr = format!("select(-{name}, {name}, {} >= {})", cname(r - 1), w / 2);
                let t = Namer::stmt(j);
                stmts.push(Stmt { name: t.clone(), expr });
                exprs.insert(node.outputs[0], t);
                continue;
            }
            let mut args = Vec::new();
            for (slot, v) in node.inputs.iter().enumerate() {
                let Some(v) = *v else { continue };
                if let Some(e) = lookup(&exprs, v) {
                    args.push(e);
                    continue;
                }
                let view = input_view(g, &self.sched.folded, n, slot);
                // A one-element constant is a literal, not a binding (the scheduler counted none for it).
                if let Some(x) = wgslc_passes::scalar_literal(g, view.root) {
                    args.push(match storage(g, view.root) {
                        Storage::F32 => f32_lit(x as f32),
                        _ => i32_lit(x as i64),
                    });
                    continue;
                }
                let fresh = Namer::binding(reads.len());
                let var = bind_once(reads, view.root, &fresh);
                let (offset, terms): (String, Vec<(usize, i64, usize)>) = if node.op == Op::TileCopy {
                    // Each output coordinate wraps around the input's extent.
                    let xs = &g.ty(v).shape;
                    let xcs = contiguous_strides(xs);
                    ("0".into(), (0..xs.len()).filter(|&d| xs[d] > 1).map(|d| (d, xcs[d] as i64, xs[d])).collect())
                } else if view.offset == 0
                    && view.strides.iter().zip(&contiguous).zip(&shape).all(|((s, c), &e)| e == 1 || s == c)
                {
                    ("i".into(), vec![])
                } else {
                    let t = (0..shape.len())
                        .filter(|&d| view.strides[d] != 0 && shape[d] > 1)
                        .map(|d| (d, view.strides[d], 0))
                        .collect();
                    (view.offset.to_string(), t)
                };
                let key = (view.root, format!("{sid}:{offset}"), terms.clone());
                let name = match load_keys.iter().position(|k| *k == key) {
                    Some(p) => loads[p].name.clone(),
                    None => {
                        used_shapes[sid] |= !terms.is_empty();
                        let name = Namer::load(loads.len());
                        loads.push(FusedLoad {
                            name: name.clone(),
                            ld: Ld::of(g, view.root, &var),
                            var,
                            offset,
                            terms: terms
                                .iter()
                                .map(|&(d, stride, modulo)| NamedTerm { coord: cname(d), stride, modulo })
                                .collect(),
                        });
                        load_keys.push(key);
                        name
                    }
                };
                args.push(name);
            }
            let inputs: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
            let out_ty = g.ty(node.outputs[0]).clone();
            used_shapes[sid] |= matches!(node.op, Op::Trilu { .. });
            let expr = self.op_expr(n, &args, &inputs, &out_ty, helpers, &cname)?;
            let name = Namer::stmt(j);
            stmts.push(Stmt { name: name.clone(), expr });
            exprs.insert(node.outputs[0], name);
        }
        let result = exprs[&g.node(last).outputs[0]].clone();
        let mut coords = Vec::new();
        for (sid, shape) in shapes.iter().enumerate() {
            if !used_shapes[sid] {
                continue;
            }
            let cs = contiguous_strides(shape);
            for d in 0..shape.len() {
                coords.push(NamedCoord { name: Namer::coord(sid, d), stride: cs[d], extent: shape[d].max(1) });
            }
        }
        let mut fu = Fused {
            defined: true,
            ty: storage(g, g.node(last).outputs[0]).wgsl(),
            coords,
            loads,
            stmts,
            result,
            ..Fused::default()
        };
        self.place_stores(group, &mut fu);
        Ok(fu)
    }

    /// A node whose operands other than its data slot are scalar constants (`scalar_op_data_slot`), applied to
    /// the expression `x` with the constants inlined.
    pub(super) fn scalar_expr(&self, p: NodeId, x: &str, helpers: &mut Helpers) -> Result<String, EmitError> {
        let g = self.g;
        let pn = g.node(p);
        let ds = wgslc_passes::scalar_op_data_slot(g, p).expect("scalar op");
        let args: Vec<String> = pn
            .inputs
            .iter()
            .flatten()
            .enumerate()
            .map(
                |(i, &v)| {
                    if i == ds {
                        x.to_string()
                    } else {
                        f32_lit(g.const_data(v).expect("scalar").to_f64()[0] as f32)
                    }
                },
            )
            .collect();
        let inputs: Vec<ValueId> = pn.inputs.iter().flatten().copied().collect();
        let ot = g.ty(pn.outputs[0]).clone();
        self.op_expr(p, &args, &inputs, &ot, helpers, &|d| format!("c{d}"))
    }

    /// Concat: one copy kernel per input, each writing its slab of the output.
    pub(super) fn concat(&self, n: NodeId, axis: usize) -> Result<Vec<EmittedKernel>, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let out = node.outputs[0];
        let ocs: Vec<i64> = contiguous_strides(&g.ty(out).shape).iter().map(|&s| s as i64).collect();
        let mut start = 0usize;
        let mut kernels = Vec::new();
        for (k, (slot, v)) in node.inputs.iter().enumerate().filter_map(|(s, v)| v.map(|v| (s, v))).enumerate() {
            let shape = g.ty(v).shape.clone();
            let offset = start as i64 * ocs[axis];
            start += shape[axis];
            let numel: usize = shape.iter().product();
            if numel == 0 {
                continue;
            }
            let cs = contiguous_strides(&shape);
            let store_coords = shape.iter().zip(&cs).map(|(&e, &s)| Coord { stride: s, extent: e.max(1) }).collect();
            // The input as stored, through the layout copies folded into this read (a window of a cache).
            let view = input_view(g, &self.sched.folded, n, slot);
            let plain = view.offset == 0 && (0..shape.len()).all(|d| shape[d] == 1 || view.strides[d] == cs[d] as i64);
            let dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] > 1 && !plain).collect();
            let fu = Fused {
                defined: true,
                ty: storage(g, v).wgsl(),
                coords: dims
                    .iter()
                    .map(|&d| NamedCoord { name: Namer::coord(0, d), stride: cs[d], extent: shape[d] })
                    .collect(),
                loads: vec![FusedLoad {
                    name: "x0".into(),
                    var: "in0".into(),
                    ld: Ld::of(g, view.root, "in0"),
                    offset: if plain { "i".into() } else { view.offset.to_string() },
                    terms: dims
                        .iter()
                        .filter(|&&d| view.strides[d] != 0)
                        .map(|&d| NamedTerm { coord: Namer::coord(0, d), stride: view.strides[d], modulo: 0 })
                        .collect(),
                }],
                stmts: vec![],
                result: "x0".into(),
                ..Fused::default()
            };
            let terms = (0..shape.len()).filter(|&d| shape[d] > 1).map(|d| Term { coord: d, stride: ocs[d] }).collect();
            let b = [(view.root, false, "in0"), (out, true, "out")];
            let (h, wg, groups_x) = self.launch(n, None, "elementwise.wgsl", &b, numel.div_ceil(256))?;
            let tpl = ElementwiseTpl {
                h,
                helpers: Helpers::default(),
                fu,
                groups_x,
                numel,
                store_coords,
                store: Index { offset: offset.to_string(), terms },
            };
            kernels.push(self.kernel(n, format!("{}#{k}", node.name), "concat", tpl.render(), &b, wg)?);
        }
        Ok(kernels)
    }

    pub(super) fn gather(&self, group: &KernelGroup, axis: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let n = group.anchor.expect("anchor");
        let node = g.node(n);
        let (data, ind, gout) = (node.inputs[0].unwrap(), node.inputs[1].unwrap(), node.outputs[0]);
        let out = g.node(group.last()).outputs[0];
        let mut helpers = Helpers::default();
        let mut reads: Vec<(ValueId, String)> =
            vec![(storage_root(g, data), "data".into()), (storage_root(g, ind), "indices".into())];
        let fu = self.fused_body(group, Some(gout), &mut reads, &mut helpers)?;
        let dt = g.ty(data);
        let positions = g.ty(ind).numel();
        let inner: usize = dt.shape[axis + 1..].iter().product();
        let numel = g.ty(out).numel();
        let b = bindings(&reads, &[(out, "out")]);
        let (h, wg, groups_x) = self.launch(n, Some(group), "gather.wgsl", &b, numel.div_ceil(256))?;
        let tpl = GatherTpl {
            h,
            helpers,
            fu,
            groups_x,
            numel,
            positions,
            inner,
            positions_inner: positions * inner,
            axis_len: dt.shape[axis],
            data_ld: Ld::of(g, storage_root(g, data), "data"),
        };
        let name = self.group_name(group);
        self.kernel(n, name, "gather", tpl.render(), &b, wg)
    }

    /// An embedding lookup over a table stored in blocks of `rows` rows: each output element reads its row from
    /// the block that holds it (templates/gather_blocks.wgsl), one dispatch for the whole table.
    pub(super) fn gather_blocks(&self, n: NodeId, rows: usize) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let (ind, out) = (node.inputs[0].unwrap(), node.outputs[0]);
        let tables: Vec<ValueId> = node.inputs[1..].iter().map(|v| v.expect("a block")).collect();
        let names: Vec<String> = (0..tables.len()).map(|i| format!("block{i}")).collect();
        let mut b: Vec<(ValueId, bool, &str)> = vec![(ind, false, "indices")];
        b.extend(tables.iter().zip(&names).map(|(&t, name)| (t, false, name.as_str())));
        b.push((out, true, "out"));
        let inner: usize = g.ty(tables[0]).shape[1..].iter().product();
        let axis_len: usize = tables.iter().map(|&t| g.ty(t).shape[0]).sum();
        let numel = g.ty(out).numel();
        let (h, wg, groups_x) = self.launch(n, None, "gather_blocks.wgsl", &b, numel.div_ceil(256))?;
        let blocks = tables.iter().zip(&names).map(|(&t, name)| Ld::of(g, t, name)).collect();
        let tpl = GatherBlocksTpl { h, groups_x, numel, inner, rows, axis_len, blocks };
        self.kernel(n, node.name.clone(), "gather", tpl.render(), &b, wg)
    }
}
