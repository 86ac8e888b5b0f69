//! Identical constants stored once.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use wgslc_ir::{Data, Graph, ValueId};

/// A hash of up to 512 elements spread over the tensor (gigabytes of weights are not hashed whole; equal
/// fingerprints are compared in full).
fn fingerprint(d: &Data) -> u64 {
    fn sample<T, K: Hash>(v: &[T], key: impl Fn(&T) -> K, h: &mut impl Hasher) {
        v.iter().step_by((v.len() / 512).max(1)).for_each(|x| key(x).hash(h));
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match d {
        Data::F32(v) => sample(v, |x| x.to_bits(), &mut h),
        Data::I64(v) => sample(v, |&x| x, &mut h),
        Data::Bool(v) => sample(v, |&x| x, &mut h),
        Data::Blocks(b) => {
            sample(&b.codes, |&x| x, &mut h);
            sample(&b.scales, |x| x.to_bits(), &mut h);
        }
    }
    h.finish()
}

fn same(a: &Data, b: &Data) -> bool {
    match (a, b) {
        // Bitwise: -0.0 and 0.0 differ, NaNs with one payload are one constant.
        (Data::F32(x), Data::F32(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
        (Data::I64(x), Data::I64(y)) => x == y,
        (Data::Bool(x), Data::Bool(y)) => x == y,
        (Data::Blocks(x), Data::Blocks(y)) => x == y,
        _ => false,
    }
}

/// Makes every reader of a constant read the first constant of identical dtype, shape and bits instead. Folding
/// and merging derive the same constant more than once where a model computes the same thing twice (a tied
/// weight transposed for the LM head in both steps of a `--kv-cache` decoder, the Q/K/V weights concatenated
/// per step), and each would otherwise be stored and uploaded separately.
///
/// Requires: an inferred graph. Establishes: no two constants that nodes read are bitwise identical.
pub fn dedupe_constants(g: &mut Graph) {
    let mut by_shape: HashMap<(String, Vec<usize>), Vec<ValueId>> = HashMap::new();
    let read: std::collections::HashSet<ValueId> =
        g.node_ids().flat_map(|n| g.node(n).inputs.iter().flatten().copied().collect::<Vec<_>>()).collect();
    let mut consts: Vec<ValueId> = read.into_iter().filter(|&v| g.const_data(v).is_some()).collect();
    consts.sort();
    for v in consts {
        let t = g.const_data(v).expect("constant");
        by_shape.entry((t.dtype.name().to_string(), t.shape.clone())).or_default().push(v);
    }
    let mut groups: Vec<Vec<ValueId>> = by_shape.into_values().filter(|vs| vs.len() > 1).collect();
    groups.sort();
    for vs in groups {
        let mut seen: HashMap<u64, Vec<ValueId>> = HashMap::new();
        for v in vs {
            let data = &g.const_data(v).expect("constant").data;
            let bucket = seen.entry(fingerprint(data)).or_default();
            match bucket.iter().copied().find(|&w| same(&g.const_data(w).expect("constant").data, data)) {
                Some(first) => g.replace_uses(v, first),
                None => bucket.push(v),
            }
        }
    }
}

/// Nodes computing the same op on the same inputs into values of the same types computed once: each later one's readers read the first one's
/// outputs instead, and dead-code elimination removes it (torch's opset-23 exporter writes each layer's rotary
/// Cos and Sin of one angle table twice, for Q and for K; GroupQueryAttention's lowering keeps its shared values
/// itself). Not merged: cache writes (each writes its own cache in place), nodes whose outputs are graph outputs,
/// and nodes of a decoder's two steps (each step replays only the dispatches its own outputs need).
///
/// Requires: an inferred graph. Establishes: no two such nodes remain with one op and the same inputs.
pub fn dedupe_nodes(g: &mut Graph) -> Result<(), crate::PassError> {
    // (op, output types, inputs, prefill step)
    type Key = (String, String, Vec<Option<ValueId>>, bool);
    let mut first: HashMap<Key, wgslc_ir::NodeId> = HashMap::new();
    for n in g.topo_order()? {
        let node = g.node(n);
        let effects = matches!(node.op, wgslc_ir::Op::CacheWrite { .. });
        if effects || node.outputs.is_empty() || node.outputs.iter().any(|o| g.outputs.contains(o)) {
            continue;
        }
        // The output types too: a view (Alias, StridedCopy) takes its extents from its output's shape.
        let types: Vec<_> = node.outputs.iter().map(|&o| g.value(o).ty.clone()).collect();
        let key = (
            format!("{:?}", node.op),
            format!("{types:?}"),
            node.inputs.clone(),
            node.name.starts_with(crate::PREFILL),
        );
        match first.get(&key) {
            Some(&m) => {
                let pairs: Vec<(ValueId, ValueId)> =
                    node.outputs.iter().copied().zip(g.node(m).outputs.iter().copied()).collect();
                for (old, new) in pairs {
                    g.replace_uses(old, new);
                }
            }
            None => {
                first.insert(key, n);
            }
        }
    }
    Ok(())
}
