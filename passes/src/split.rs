//! Weights larger than one storage binding, split into blocks that their readers address.

use crate::lower::stored_bytes;
use crate::PassError;
use wgslc_ir::{BinaryOp, Builder, DType, Graph, NodeId, Op, Tensor, TensorType, ValueId};

/// Splits every constant larger than `max_bytes` (WebGPU's maxStorageBufferBindingSize: 128 MiB by default) into
/// blocks of rows no larger, so that no kernel binds more than the limit and the weight buffers stay within theirs:
/// - `Gather(E, idx)` along axis 0 (an embedding table): one `GatherBlocks` over the blocks where they fit
///   `max_bindings` storage bindings with the indices and the output, else one Gather per block of rows, each
///   reading the indices that fall in it (`idx − start`, negative indices wrapped first) and masked to zero
///   elsewhere, summed;
/// - `MatMul(x, W)` and `Gemm(x, W)`: one product per block of W's output columns (rows of W under `transB`, of E
///   under a transposing copy: a tied LM head), joined by a Concat along the last axis, which the scheduler then
///   writes in place; `MatMul(W, x)`: blocks of W's rows, joined along the second-to-last axis;
/// - a lookup in a transposing copy of W (a `[hidden, vocab]` LM head weight tied to the embedding): the
///   transposed table stored as a constant of its own, split as any table.
///
/// Requires: a legalized graph. Establishes: no constant is larger than `max_bytes`, or an error names the
/// constant, its size, the limit and the reader that cannot address blocks; a weight's blocks are stored once,
/// whatever reads them. Names: block `i` of `E` is
/// `E.block{i}`; the nodes are named after the reader.
pub fn split_weights(g: &mut Graph, max_bytes: u64, max_bindings: usize) -> Result<(), PassError> {
    let order = g.topo_order()?;
    let mut big: Vec<ValueId> = Vec::new();
    for &n in &order {
        for v in g.node(n).inputs.iter().flatten() {
            if g.const_data(*v).is_some() && stored_bytes(g, *v) > max_bytes && !big.contains(v) {
                big.push(*v);
            }
        }
    }
    for c in big {
        for r in g.consumers(c) {
            let node = g.node(r).clone();
            let slot = node.inputs.iter().position(|&i| i == Some(c)).expect("a reader reads it");
            let refuse = |why: &str| PassError::Node {
                node: node.name.clone(),
                op: node.op.name().into(),
                reason: format!(
                    "reads '{}' ({} bytes), more than one binding holds ({max_bytes} bytes), and {why}",
                    g.value(c).name,
                    stored_bytes(g, c)
                ),
            };
            let rank = g.ty(c).rank();
            match (&node.op, slot) {
                (Op::Gather { axis: 0 }, 0) if rank >= 1 => gather(g, r, c, max_bytes, max_bindings)?,
                (Op::MatMul, 1) if rank == 2 => product(g, r, c, Layout::Columns, max_bytes)?,
                (Op::MatMul, 0) if rank == 2 => product(g, r, c, Layout::Rows, max_bytes)?,
                (Op::Gemm { trans_b, .. }, 1) if rank == 2 => {
                    let layout = if *trans_b { Layout::TransposedRows } else { Layout::Columns };
                    product(g, r, c, layout, max_bytes)?
                }
                (Op::StridedCopy { offset: 0, strides }, 0)
                    if rank == 2 && *strides == [1, g.ty(c).shape[1] as i64] =>
                {
                    // A transpose of the weight: every reader must be a MatMul reading it as B (a tied LM head)
                    // or a lookup in it (onnxruntime-genai's fp32 builds tie the embedding to the LM head's
                    // [hidden, vocab] weight so).
                    let t = node.outputs[0];
                    let readers = g.consumers(t);
                    let is_b = |m: NodeId| g.node(m).op == Op::MatMul && g.node(m).inputs[1] == Some(t);
                    let is_lookup =
                        |m: NodeId| g.node(m).op == (Op::Gather { axis: 0 }) && g.node(m).inputs[0] == Some(t);
                    let lookups: Vec<NodeId> = readers.iter().copied().filter(|&m| is_lookup(m)).collect();
                    let products: Vec<NodeId> = readers.iter().copied().filter(|&m| is_b(m)).collect();
                    let plain = g.const_data(c).is_some_and(|d| d.data.blocks().is_none());
                    if readers.is_empty()
                        || lookups.len() + products.len() != readers.len()
                        || g.outputs.contains(&t)
                        || (!lookups.is_empty() && !plain)
                    {
                        return Err(refuse("its transpose is read by other than matrix products"));
                    }
                    if !lookups.is_empty() {
                        // The lookups read a transposed copy of the table, in blocks of rows (stored once more).
                        let table = transposed(g.const_data(c).expect("a constant"));
                        let name = format!("{}.transposed", g.value(c).name);
                        let copy = g.add_const(name, table);
                        for &m in &lookups {
                            let mut inputs = g.node(m).inputs.clone();
                            inputs[0] = Some(copy);
                            g.set_inputs(m, inputs);
                            gather(g, m, copy, max_bytes, max_bindings)?;
                        }
                    }
                    for m in products {
                        transposed_product(g, m, r, c, max_bytes)?;
                    }
                    g.remove_node(r);
                }
                _ => return Err(refuse("that op cannot address it in blocks")),
            }
        }
    }
    crate::eliminate_dead_code(g);
    // Each reader cut its own blocks; the readers of one weight (a tied table's lookup and LM head) share them.
    crate::dedupe_constants(g);
    Ok(())
}

/// A 2-D constant transposed.
fn transposed(t: &Tensor) -> Tensor {
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let data = match &t.data {
        wgslc_ir::Data::F32(v) => {
            wgslc_ir::Data::F32((0..rows * cols).map(|i| v[(i % rows) * cols + i / rows]).collect())
        }
        d => d.gather(&(0..rows * cols).map(|i| (i % rows) * cols + i / rows).collect::<Vec<_>>()),
    };
    Tensor { dtype: t.dtype, shape: vec![cols, rows], data }
}

/// Which way a product's constant operand is cut, and so along which output axis the blocks join.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// B [K, N]: blocks of columns, joined along the output's last axis.
    Columns,
    /// B [N, K] read transposed (Gemm transB): blocks of rows, joined along the last axis.
    TransposedRows,
    /// A [M, K]: blocks of rows, joined along the second-to-last axis.
    Rows,
}

/// `[start, end)` blocks of `n` items, each at most `per` items.
fn blocks(n: usize, per: usize) -> Vec<(usize, usize)> {
    (0..n.div_ceil(per)).map(|i| (i * per, ((i + 1) * per).min(n))).collect()
}

/// Rows `[a, b)` (along axis 0) or columns `[a, b)` (along axis 1, a 2-D tensor) of a constant.
fn slice_const(t: &Tensor, (a, b): (usize, usize), columns: bool) -> Tensor {
    let mut shape = t.shape.clone();
    shape[if columns { 1 } else { 0 }] = b - a;
    // A block-quantized table's whole rows stay quantized: each tensor row is `per` of its rows.
    if let (Some(q), false) = (t.data.blocks(), columns) {
        let row: usize = t.shape[1..].iter().product();
        if row.is_multiple_of(q.row) {
            let per = row / q.row;
            let data = wgslc_ir::Data::Blocks(std::sync::Arc::new(q.rows_range(a * per, b * per)));
            return Tensor { dtype: t.dtype, shape, data };
        }
    }
    // Whole rows are one contiguous run: copied as such (a table's blocks are hundreds of MB).
    if let (wgslc_ir::Data::F32(v), false) = (&t.data, columns) {
        let row: usize = t.shape[1..].iter().product();
        return Tensor { dtype: t.dtype, shape, data: wgslc_ir::Data::F32(v[a * row..b * row].to_vec()) };
    }
    let idx: Vec<usize> = if columns {
        let (rows, cols) = (t.shape[0], t.shape[1]);
        (0..rows).flat_map(|r| (a..b).map(move |c| r * cols + c)).collect()
    } else {
        let row: usize = t.shape[1..].iter().product();
        (a * row..b * row).collect()
    };
    Tensor { dtype: t.dtype, shape, data: t.data.gather(&idx) }
}

/// How many items of `item_bytes` one binding of `max_bytes` holds (at least one, or an error naming `c`).
fn per_block(g: &Graph, c: ValueId, item_bytes: u64, max_bytes: u64, n: NodeId) -> Result<usize, PassError> {
    let per = max_bytes / item_bytes.max(1);
    if per == 0 {
        let node = g.node(n);
        return Err(PassError::Node {
            node: node.name.clone(),
            op: node.op.name().into(),
            reason: format!(
                "one row of '{}' ({item_bytes} bytes) is larger than one binding ({max_bytes} bytes)",
                g.value(c).name
            ),
        });
    }
    Ok(per as usize)
}

/// The blocks of constant `c` as constants of their own.
fn block_consts(g: &mut Graph, c: ValueId, ranges: &[(usize, usize)], columns: bool) -> Vec<ValueId> {
    let t = g.const_data(c).expect("a constant").clone();
    let name = g.value(c).name.clone();
    ranges
        .iter()
        .enumerate()
        .map(|(i, &r)| Builder::new(g, &name).const_named(&format!("block{i}"), slice_const(&t, r, columns)))
        .collect()
}

/// An embedding lookup over a table split into blocks of rows: one `GatherBlocks` reading every block, when
/// they fit one kernel's bindings beside the indices and the output; else one Gather per block, each reading the
/// indices that fall in it (`idx − start`, negative indices wrapped first) and masked to zero elsewhere, summed.
fn gather(g: &mut Graph, n: NodeId, c: ValueId, max_bytes: u64, max_bindings: usize) -> Result<(), PassError> {
    let node = g.node(n).clone();
    let (idx, out) = (node.inputs[1].expect("indices"), node.outputs[0]);
    let (ct, it, ot) = (g.ty(c).clone(), g.ty(idx).clone(), g.ty(out).clone());
    let row_bytes = stored_bytes(g, c).div_ceil(ct.shape[0].max(1) as u64);
    let per = per_block(g, c, row_bytes, max_bytes, n)?;
    let ranges = blocks(ct.shape[0], per);
    let tables = block_consts(g, c, &ranges, false);
    g.remove_node(n);
    let mut b = Builder::new(g, &node.name);
    if tables.len() + 2 <= max_bindings {
        let inputs: Vec<Option<ValueId>> = std::iter::once(idx).chain(tables).map(Some).collect();
        b.op_into("blocks", Op::GatherBlocks { rows: per }, &inputs, vec![out])?;
        return Ok(());
    }
    let bool_ty = TensorType::new(DType::Bool, it.shape.clone());
    // Negative indices count from the end of the whole table.
    let zero = b.const_named("zero", Tensor::from_f64(it.dtype, vec![], vec![0.0]));
    let total = b.const_named("rows", Tensor::from_f64(it.dtype, vec![], vec![ct.shape[0] as f64]));
    let neg = b.op_typed("negative", Op::Binary(BinaryOp::Less), &[Some(idx), Some(zero)], bool_ty.clone())?;
    let t = it.clone();
    let wrapped = b.op_typed("wrapped", Op::Binary(BinaryOp::Add), &[Some(idx), Some(total)], t.clone())?;
    let idx = b.op_typed("index", Op::Where, &[Some(neg), Some(wrapped), Some(idx)], t.clone())?;
    let mut mask_shape = it.shape.clone();
    mask_shape.extend(std::iter::repeat_n(1, ct.rank() - 1));
    let fzero = b.const_named("fzero", Tensor::from_f64(ot.dtype, vec![], vec![0.0]));
    let mut acc: Option<ValueId> = None;
    for (i, (&(s, e), &table)) in ranges.iter().zip(&tables).enumerate() {
        let last = i + 1 == ranges.len();
        let sc = b.const_named(&format!("start{i}"), Tensor::from_f64(it.dtype, vec![], vec![s as f64]));
        let ec = b.const_named(&format!("end{i}"), Tensor::from_f64(it.dtype, vec![], vec![e as f64]));
        let local = b.op_typed(&format!("local{i}"), Op::Binary(BinaryOp::Sub), &[Some(idx), Some(sc)], t.clone())?;
        let rows =
            b.op_typed(&format!("gather{i}"), Op::Gather { axis: 0 }, &[Some(table), Some(local)], ot.clone())?;
        let ge = b.op_typed(
            &format!("from{i}"),
            Op::Binary(BinaryOp::GreaterOrEqual),
            &[Some(idx), Some(sc)],
            bool_ty.clone(),
        )?;
        let lt = b.op_typed(&format!("to{i}"), Op::Binary(BinaryOp::Less), &[Some(idx), Some(ec)], bool_ty.clone())?;
        let inside =
            b.op_typed(&format!("in{i}"), Op::Binary(BinaryOp::And), &[Some(ge), Some(lt)], bool_ty.clone())?;
        let mask = b.op_typed(
            &format!("mask{i}"),
            Op::Alias,
            &[Some(inside)],
            TensorType::new(DType::Bool, mask_shape.clone()),
        )?;
        let part = b.op_typed(&format!("part{i}"), Op::Where, &[Some(mask), Some(rows), Some(fzero)], ot.clone())?;
        acc = Some(match acc {
            None if last => {
                b.op_into("sum", Op::Binary(BinaryOp::Add), &[Some(part), Some(fzero)], vec![out])?;
                out
            }
            None => part,
            Some(a) if last => {
                b.op_into("sum", Op::Binary(BinaryOp::Add), &[Some(a), Some(part)], vec![out])?;
                out
            }
            Some(a) => b.op_typed(&format!("sum{i}"), Op::Binary(BinaryOp::Add), &[Some(a), Some(part)], ot.clone())?,
        });
    }
    Ok(())
}

/// A product with a constant operand split into blocks, the block products joined by a Concat writing the
/// product's output.
fn product(g: &mut Graph, n: NodeId, c: ValueId, layout: Layout, max_bytes: u64) -> Result<(), PassError> {
    let node = g.node(n).clone();
    let (ct, out) = (g.ty(c).clone(), node.outputs[0]);
    let ot = g.ty(out).clone();
    let elem = stored_bytes(g, c).div_ceil((ct.shape[0] * ct.shape[1]).max(1) as u64);
    // Items: the columns of B [K, N], the rows of B [N, K] (transB) or of A [M, K].
    let (items, item_bytes, columns) = match layout {
        Layout::Columns => (ct.shape[1], ct.shape[0] as u64 * elem, true),
        Layout::TransposedRows | Layout::Rows => (ct.shape[0], ct.shape[1] as u64 * elem, false),
    };
    let ranges = blocks(items, per_block(g, c, item_bytes, max_bytes, n)?);
    let parts = block_consts(g, c, &ranges, columns);
    // A Gemm's bias over N is cut the same way; other biases are not.
    let bias = node.inputs.get(2).copied().flatten();
    let bias_parts = match (bias, layout) {
        (Some(bv), Layout::Columns | Layout::TransposedRows) => {
            let bt = g.ty(bv);
            if bt.rank() != 1 || bt.shape[0] != items || g.const_data(bv).is_none() {
                return Err(PassError::Node {
                    node: node.name.clone(),
                    op: node.op.name().into(),
                    reason: "a weight split into blocks needs a constant bias over the output columns".into(),
                });
            }
            block_consts(g, bv, &ranges, false).into_iter().map(Some).collect()
        }
        _ => vec![None; ranges.len()],
    };
    let axis = if layout == Layout::Rows { ot.rank() - 2 } else { ot.rank() - 1 };
    g.remove_node(n);
    let mut b = Builder::new(g, &node.name);
    let mut joined = Vec::new();
    for (i, ((&(s, e), &w), bias)) in ranges.iter().zip(&parts).zip(bias_parts).enumerate() {
        let mut inputs = node.inputs.clone();
        inputs[if layout == Layout::Rows { 0 } else { 1 }] = Some(w);
        if let Some(bp) = bias {
            inputs[2] = Some(bp);
        }
        let mut shape = ot.shape.clone();
        shape[axis] = e - s;
        let ty = TensorType::new(ot.dtype, shape);
        joined.push(Some(b.op_typed(&format!("block{i}"), node.op.clone(), &inputs, ty)?));
    }
    b.op_into("join", Op::Concat { axis: axis as i64 }, &joined, vec![out])?;
    Ok(())
}

/// A MatMul reading a transposing copy `t` of constant `c` [N, K] as B: blocks of c's rows, each transposed by a
/// copy of its own, one product per block, joined along the last axis.
fn transposed_product(g: &mut Graph, m: NodeId, t: NodeId, c: ValueId, max_bytes: u64) -> Result<(), PassError> {
    let node = g.node(m).clone();
    let (ct, out) = (g.ty(c).clone(), node.outputs[0]);
    let ot = g.ty(out).clone();
    let row_bytes = stored_bytes(g, c).div_ceil(ct.shape[0].max(1) as u64);
    let ranges = blocks(ct.shape[0], per_block(g, c, row_bytes, max_bytes, m)?);
    let parts = block_consts(g, c, &ranges, false);
    let copy = g.node(t).name.clone();
    g.remove_node(m);
    let mut joined = Vec::new();
    for (i, (&(s, e), &w)) in ranges.iter().zip(&parts).enumerate() {
        let tt = TensorType::new(ct.dtype, vec![ct.shape[1], e - s]);
        let strides = vec![1, ct.shape[1] as i64];
        let wt = Builder::new(g, &copy).op_typed(
            &format!("block{i}"),
            Op::StridedCopy { offset: 0, strides },
            &[Some(w)],
            tt,
        )?;
        let mut inputs = node.inputs.clone();
        inputs[1] = Some(wt);
        let mut shape = ot.shape.clone();
        *shape.last_mut().expect("rank") = e - s;
        let ty = TensorType::new(ot.dtype, shape);
        joined.push(Some(Builder::new(g, &node.name).op_typed(&format!("block{i}"), Op::MatMul, &inputs, ty)?));
    }
    Builder::new(g, &node.name).op_into("join", Op::Concat { axis: ot.rank() as i64 - 1 }, &joined, vec![out])?;
    Ok(())
}
