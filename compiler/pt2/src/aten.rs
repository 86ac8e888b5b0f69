//! ATen ops → IR ops. Each node's arguments are read by the names torch's schema gives them (`self`, `dim`,
//! `keepdim`, ...), with the schema's defaults where the serializer left a keyword out; dtypes and shapes of
//! every tensor come from the graph's `tensor_values`, so type promotion is explicit: an operand whose dtype
//! differs from the one torch computes in is cast, and a Python scalar becomes a constant of that dtype.

use crate::schema::{self, Argument, Node, OptionalTensor, SymInt, SymIntArgument};
use crate::{dtype_of, sym, Pt2Error};
use std::collections::HashMap;
use wgslc_ir::{
    AttentionAttrs, AutoPad, BinaryOp, Builder, DType, Graph, Op, PoolKind, ReduceOp, Tensor, UnaryOp, ValueId, Window,
};

/// What a name in the program stands for.
#[derive(Clone, Debug)]
enum Val {
    T(ValueId),
    /// A SymInt (`sym_size`, `_operator.mul` of them), known once the symbols are bound.
    Int(i64),
    /// An output wgslc does not compute (a BatchNorm's saved statistics, a MaxPool's indices): reading it is an
    /// error naming why.
    Missing(String),
}

pub struct Importer<'p> {
    pub g: Graph,
    graph: &'p schema::Graph,
    dims: HashMap<String, i64>,
    vals: HashMap<String, Val>,
    /// Numbers the parts a node's translation adds.
    part: usize,
    /// Reshapes already made, by (input, shape): ATen graphs view one value the same way once per reader (each
    /// `linear` of a block flattens its input itself), and fusion sees one value where the model means one.
    reshapes: HashMap<(ValueId, Vec<usize>), ValueId>,
    /// What each reshape reshaped: its input and that input's shape. A view back to that shape is the input
    /// itself, and a `bmm` of flattened batches is the batched product of the unflattened operands (the core
    /// ATen dialect writes every attention product as view → bmm → view; fusion sees the product torch meant).
    origins: HashMap<ValueId, (ValueId, Vec<usize>)>,
    /// What each transpose transposed, and how: a transpose of a transpose is one transpose of the first's input
    /// (the identity when they cancel, as the `permute → clone → permute` of attention's decomposition does).
    perms: HashMap<ValueId, (ValueId, Vec<usize>)>,
    /// Nodes already translated, by target and resolved arguments: torch.export does not eliminate common
    /// subexpressions, so each layer recomputes what the model derives once (the attention mask of every layer).
    seen: HashMap<String, Vec<String>>,
    /// The tensor metadata of the subgraphs being inlined, innermost last (their names may repeat outer ones).
    scopes: Vec<std::collections::BTreeMap<String, schema::TensorMeta>>,
    /// The node that defines each tensor name, for the few patterns read across nodes.
    producers: HashMap<&'p str, &'p Node>,
}

/// The node being translated: its name and op for messages.
struct N<'n> {
    node: &'n Node,
    name: String,
    op: String,
}

impl N<'_> {
    fn err(&self, reason: impl Into<String>) -> Pt2Error {
        Pt2Error::Node { node: self.name.clone(), op: self.op.clone(), reason: reason.into() }
    }

    fn arg(&self, key: &str) -> Option<&Argument> {
        self.node.inputs.iter().find(|a| a.name == key).map(|a| &a.arg)
    }
}

type R<T> = Result<T, Pt2Error>;

/// Torch's promotion between two operand dtypes, as far as the IR's types go: a float over any integer or
/// bool, the wider of two of one kind.
fn promote(a: DType, b: DType) -> DType {
    let rank = |d: DType| {
        (
            if d.is_float() {
                2
            } else if d == DType::Bool {
                0
            } else {
                1
            },
            d.onnx_bits(),
        )
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

impl<'p> Importer<'p> {
    pub fn new(graph: &'p schema::Graph, dims: HashMap<String, i64>) -> Self {
        let mut producers = HashMap::new();
        for node in &graph.nodes {
            for o in &node.outputs {
                if let Argument::AsTensor(t) = o {
                    producers.insert(t.name.as_str(), node);
                }
            }
        }
        Importer {
            g: Graph::new(),
            graph,
            dims,
            vals: HashMap::new(),
            part: 0,
            reshapes: HashMap::new(),
            origins: HashMap::new(),
            perms: HashMap::new(),
            seen: HashMap::new(),
            scopes: Vec::new(),
            producers,
        }
    }

    /// The node producing argument `key` of `node`, if it is a tensor some node defines, with its op's base
    /// name (`eq`, `_softmax`, ...).
    fn producer_of(&self, node: &Node, key: &str) -> Option<(&'p Node, &'p str)> {
        let name = node.inputs.iter().find(|a| a.name == key).and_then(|a| match &a.arg {
            Argument::AsTensor(t) => Some(t.name.as_str()),
            _ => None,
        })?;
        let p = *self.producers.get(name)?;
        let base = p.target.strip_prefix("torch.ops.aten.")?.split('.').next()?;
        Some((p, base))
    }

    /// Torch's "safe softmax" (the core-ATen decomposition of scaled_dot_product_attention):
    /// `where(¬any(¬(s == −∞), -1), 0, softmax(s, -1))`, rows whose every score is masked give 0. Returns the
    /// softmax's output name when `n` is that `where`. Its IR form is the one the ONNX exporter writes,
    /// `where(isnan(p), 0, p)` (a row of −∞ is exactly a row whose softmax is NaN; they differ only for NaN or
    /// +∞ scores), which the attention kernel folds.
    fn safe_softmax(&self, n: &N) -> Option<String> {
        // Inside an inlined subgraph names may repeat outer ones: no cross-node patterns there.
        if !self.scopes.is_empty() {
            return None;
        }
        let node = n.node;
        let (not_any, b) = self.producer_of(node, "condition")?;
        let (any, b2) = self.producer_of(not_any, "self").filter(|_| b == "logical_not")?;
        let (not_eq, b3) = self.producer_of(any, "self").filter(|_| b2 == "any")?;
        let (eq, b4) = self.producer_of(not_eq, "self").filter(|_| b3 == "logical_not")?;
        let (sm, b5) = self.producer_of(node, "other").filter(|_| b4 == "eq")?;
        if b5 != "_softmax" && b5 != "softmax" {
            return None;
        }
        let arg = |nd: &Node, key: &str| nd.inputs.iter().find(|a| a.name == key).map(|a| a.arg.clone());
        let name_of = |a: Option<Argument>| match a {
            Some(Argument::AsTensor(t)) => Some(t.name),
            _ => None,
        };
        let scores = name_of(arg(sm, "self"))?;
        let neg_inf = matches!(arg(eq, "other"), Some(Argument::AsFloat(schema::Float(x))) if x == f64::NEG_INFINITY);
        let last = |nd: &Node, key: &str| match arg(nd, key) {
            Some(Argument::AsInt(-1)) => true,
            Some(Argument::AsInts(v)) => v == [-1],
            _ => false,
        };
        let zero = match arg(node, "self") {
            Some(Argument::AsTensor(t)) => self.producers.get(t.name.as_str()).is_some_and(|z| {
                z.target.contains("full_like")
                    && matches!(
                        arg(z, "fill_value"),
                        Some(Argument::AsInt(0)) | Some(Argument::AsFloat(schema::Float(0.0)))
                    )
            }),
            Some(Argument::AsFloat(schema::Float(x))) => x == 0.0,
            Some(Argument::AsInt(0)) => true,
            _ => false,
        };
        let same_scores = name_of(arg(eq, "self")).is_some_and(|s| s == scores);
        if !(neg_inf && same_scores && zero && last(any, "dim") && last(sm, "dim")) {
            return None;
        }
        match sm.outputs.first() {
            Some(Argument::AsTensor(t)) => Some(t.name.clone()),
            _ => None,
        }
    }

    pub fn bind(&mut self, name: &str, v: ValueId) {
        self.vals.insert(name.to_string(), Val::T(v));
    }

    /// A size from the metadata, with the bound symbols.
    pub fn size(&self, s: &SymInt) -> Result<usize, sym::Unbound> {
        let v = match s {
            SymInt::AsInt(v) => *v,
            SymInt::AsExpr(e) => sym::eval(&e.expr_str, &self.dims)?,
        };
        usize::try_from(v).map_err(|_| sym::Unbound(format!("{v} (a negative size)")))
    }

    /// Translates every node; unsupported ops are all listed before failing, as the ONNX frontend does.
    pub fn nodes(&mut self, nodes: &[Node]) -> R<()> {
        let mut unsupported: Vec<(String, String)> = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let op = node.target.strip_prefix("torch.ops.").unwrap_or(&node.target).to_string();
            let name = node.name.clone().unwrap_or_else(|| format!("{op}_{i}"));
            let n = N { node, name, op };
            if self.common(&n) {
                continue;
            }
            match self.node(&n) {
                Ok(()) => {}
                Err(Pt2Error::UnsupportedOp { node, op }) => {
                    unsupported.push((op, node));
                    for name in self.output_names(&n) {
                        self.vals.entry(name).or_insert(Val::Missing("its op is not supported".into()));
                    }
                }
                Err(e) if unsupported.is_empty() => return Err(e),
                Err(_) => {}
            }
        }
        match unsupported.as_slice() {
            [] => Ok(()),
            [(op, node)] => Err(Pt2Error::UnsupportedOp { node: node.clone(), op: op.clone() }),
            all => Err(Pt2Error::UnsupportedOps(wgslc_ir::unsupported_ops_list(all))),
        }
    }

    /// Whether `n` computes what an earlier node computed (same target, same arguments once names resolve to
    /// values): its outputs then name that node's values. Remembers `n` otherwise.
    fn common(&mut self, n: &N) -> bool {
        let mut key = n.node.target.clone();
        for a in &n.node.inputs {
            key.push('|');
            key.push_str(&a.name);
            key.push('=');
            match &a.arg {
                Argument::AsTensor(t) => match self.vals.get(&t.name) {
                    Some(Val::T(v)) => key.push_str(&format!("v{}", v.index())),
                    _ => return false,
                },
                Argument::AsTensors(ts) => {
                    for t in ts {
                        match self.vals.get(&t.name) {
                            Some(Val::T(v)) => key.push_str(&format!("v{},", v.index())),
                            _ => return false,
                        }
                    }
                }
                other => key.push_str(&format!("{other:?}")),
            }
        }
        let outs = self.output_names(n);
        if outs.is_empty() || outs.len() != n.node.outputs.len() {
            return false;
        }
        match self.seen.get(&key) {
            Some(prev) if prev.len() == outs.len() => {
                let vals: Vec<Option<Val>> = prev.iter().map(|p| self.vals.get(p).cloned()).collect();
                if vals.iter().any(Option::is_none) {
                    return false;
                }
                for (o, v) in outs.into_iter().zip(vals) {
                    self.vals.insert(o, v.unwrap());
                }
                true
            }
            _ => {
                self.seen.insert(key, outs);
                false
            }
        }
    }

    /// A user output: a tensor the graph defines.
    pub fn output(&mut self, arg: &Argument) -> R<ValueId> {
        let bad = |reason: String| Pt2Error::Output { name: format!("{arg:?}"), reason };
        match arg {
            Argument::AsTensor(t) => match self.vals.get(&t.name) {
                Some(Val::T(v)) => Ok(*v),
                Some(Val::Missing(why)) => {
                    Err(Pt2Error::Output { name: t.name.clone(), reason: format!("not computed: {why}") })
                }
                _ => Err(Pt2Error::Output { name: t.name.clone(), reason: "no node defines it".into() }),
            },
            other => Err(bad(format!("{} output is not supported; return tensors", other.kind()))),
        }
    }

    fn output_names(&self, n: &N) -> Vec<String> {
        let mut out = Vec::new();
        for o in &n.node.outputs {
            match o {
                Argument::AsTensor(t) => out.push(t.name.clone()),
                Argument::AsTensors(ts) => out.extend(ts.iter().map(|t| t.name.clone())),
                Argument::AsSymInt(SymIntArgument::AsName(s)) => out.push(s.clone()),
                _ => {}
            }
        }
        out
    }

    // ---- reading arguments ----

    fn value(&self, n: &N, name: &str) -> R<ValueId> {
        match self.vals.get(name) {
            Some(Val::T(v)) => Ok(*v),
            Some(Val::Missing(why)) => Err(n.err(format!("reads '{name}', which is not computed: {why}"))),
            Some(Val::Int(_)) => Err(n.err(format!("reads '{name}' as a tensor; it is a SymInt"))),
            None => Err(n.err(format!("reads '{name}', which no node, input or weight defines"))),
        }
    }

    fn t(&self, n: &N, key: &str) -> R<ValueId> {
        match n.arg(key) {
            Some(Argument::AsTensor(t)) => self.value(n, &t.name),
            Some(Argument::AsOptionalTensor(OptionalTensor::AsTensor(t))) => self.value(n, &t.name),
            Some(other) => Err(n.err(format!("argument '{key}' is {}, expected a tensor", other.kind()))),
            None => Err(n.err(format!("argument '{key}' is missing"))),
        }
    }

    fn opt_t(&self, n: &N, key: &str) -> R<Option<ValueId>> {
        match n.arg(key) {
            None | Some(Argument::AsNone(_)) | Some(Argument::AsOptionalTensor(OptionalTensor::AsNone(_))) => Ok(None),
            Some(_) => self.t(n, key).map(Some),
        }
    }

    fn tensor_name<'a>(&self, n: &'a N, key: &str) -> Option<&'a str> {
        match n.arg(key) {
            Some(Argument::AsTensor(t)) | Some(Argument::AsOptionalTensor(OptionalTensor::AsTensor(t))) => {
                Some(&t.name)
            }
            _ => None,
        }
    }

    fn sym_int(&self, n: &N, s: &SymIntArgument) -> R<i64> {
        match s {
            SymIntArgument::AsInt(v) => Ok(*v),
            SymIntArgument::AsName(name) => match self.vals.get(name) {
                Some(Val::Int(v)) => Ok(*v),
                _ => Err(n.err(format!("reads SymInt '{name}', which nothing defines"))),
            },
        }
    }

    fn opt_int(&self, n: &N, key: &str) -> R<Option<i64>> {
        match n.arg(key) {
            None | Some(Argument::AsNone(_)) => Ok(None),
            Some(Argument::AsInt(v)) => Ok(Some(*v)),
            Some(Argument::AsBool(b)) => Ok(Some(*b as i64)),
            Some(Argument::AsSymInt(s)) => self.sym_int(n, s).map(Some),
            Some(other) => Err(n.err(format!("argument '{key}' is {}, expected an int", other.kind()))),
        }
    }

    fn int(&self, n: &N, key: &str, default: Option<i64>) -> R<i64> {
        self.opt_int(n, key)?.or(default).ok_or_else(|| n.err(format!("argument '{key}' is missing")))
    }

    fn opt_ints(&self, n: &N, key: &str) -> R<Option<Vec<i64>>> {
        match n.arg(key) {
            None | Some(Argument::AsNone(_)) => Ok(None),
            Some(Argument::AsInts(v)) => Ok(Some(v.clone())),
            Some(Argument::AsInt(v)) => Ok(Some(vec![*v])),
            Some(Argument::AsSymInts(v)) => v.iter().map(|s| self.sym_int(n, s)).collect::<R<Vec<_>>>().map(Some),
            Some(Argument::AsSymInt(s)) => Ok(Some(vec![self.sym_int(n, s)?])),
            Some(other) => Err(n.err(format!("argument '{key}' is {}, expected ints", other.kind()))),
        }
    }

    fn ints(&self, n: &N, key: &str, default: Option<Vec<i64>>) -> R<Vec<i64>> {
        self.opt_ints(n, key)?.or(default).ok_or_else(|| n.err(format!("argument '{key}' is missing")))
    }

    /// A Python number argument (int, float or bool).
    fn opt_number(&self, n: &N, key: &str) -> R<Option<f64>> {
        match n.arg(key) {
            None | Some(Argument::AsNone(_)) => Ok(None),
            Some(Argument::AsFloat(f)) => Ok(Some(f.0)),
            Some(Argument::AsInt(v)) => Ok(Some(*v as f64)),
            Some(Argument::AsBool(b)) => Ok(Some(*b as i64 as f64)),
            Some(Argument::AsSymInt(s)) => Ok(Some(self.sym_int(n, s)? as f64)),
            Some(other) => Err(n.err(format!("argument '{key}' is {}, expected a number", other.kind()))),
        }
    }

    fn number(&self, n: &N, key: &str, default: Option<f64>) -> R<f64> {
        self.opt_number(n, key)?.or(default).ok_or_else(|| n.err(format!("argument '{key}' is missing")))
    }

    fn boolean(&self, n: &N, key: &str, default: bool) -> R<bool> {
        match n.arg(key) {
            None | Some(Argument::AsNone(_)) => Ok(default),
            Some(Argument::AsBool(b)) => Ok(*b),
            Some(Argument::AsInt(v)) => Ok(*v != 0),
            Some(other) => Err(n.err(format!("argument '{key}' is {}, expected a bool", other.kind()))),
        }
    }

    fn string(&self, n: &N, key: &str) -> R<Option<String>> {
        match n.arg(key) {
            None | Some(Argument::AsNone(_)) => Ok(None),
            Some(Argument::AsString(s)) => Ok(Some(s.clone())),
            Some(other) => Err(n.err(format!("argument '{key}' is {}, expected a string", other.kind()))),
        }
    }

    // ---- metadata ----

    fn meta(&self, n: &N, name: &str) -> R<(DType, Vec<usize>)> {
        let m = self
            .scopes
            .iter()
            .rev()
            .find_map(|s| s.get(name))
            .or_else(|| self.graph.tensor_values.get(name))
            .ok_or_else(|| n.err(format!("'{name}' has no tensor metadata")))?;
        let dt = dtype_of(m.dtype).map_err(|e| n.err(format!("'{name}': {e}")))?;
        let shape = m
            .sizes
            .iter()
            .map(|s| self.size(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|sym::Unbound(s)| n.err(format!("the size of '{name}' needs '{s}'")))?;
        Ok((dt, shape))
    }

    /// The dtype and shape of argument `key` (a tensor).
    fn arg_meta(&self, n: &N, key: &str) -> R<(DType, Vec<usize>)> {
        let name = self.tensor_name(n, key).ok_or_else(|| n.err(format!("argument '{key}' is not a tensor")))?;
        self.meta(n, name)
    }

    fn out_name(&self, n: &N, i: usize) -> R<String> {
        self.output_names(n).get(i).cloned().ok_or_else(|| n.err(format!("has no output {i}")))
    }

    fn out_meta(&self, n: &N, i: usize) -> R<(DType, Vec<usize>)> {
        let name = self.out_name(n, i)?;
        self.meta(n, &name)
    }

    // ---- emitting ----

    fn next_part(&mut self, what: &str) -> String {
        self.part += 1;
        format!("{what}{}", self.part)
    }

    /// An intermediate node of `n`'s translation.
    fn emit(&mut self, n: &N, what: &str, op: Op, inputs: &[Option<ValueId>]) -> R<ValueId> {
        let part = self.next_part(what);
        Builder::new(&mut self.g, &n.name).op_named(&part, op, inputs).map_err(|e| n.err(e.to_string()))
    }

    fn konst(&mut self, n: &N, what: &str, t: Tensor) -> ValueId {
        let part = self.next_part(what);
        Builder::new(&mut self.g, &n.name).const_named(&part, t)
    }

    fn ints_const(&mut self, n: &N, v: &[i64]) -> ValueId {
        self.konst(n, "ints", Tensor::i64(vec![v.len()], v.to_vec()))
    }

    fn scalar(&mut self, n: &N, dt: DType, x: f64) -> ValueId {
        self.konst(n, "scalar", Tensor::from_f64(dt, vec![], vec![x]))
    }

    /// The node itself, writing its first `count` outputs under torch's names; returns them.
    fn finish_outputs(&mut self, n: &N, op: Op, inputs: &[Option<ValueId>], count: usize) -> R<Vec<ValueId>> {
        let mut outs = Vec::new();
        for i in 0..count {
            let name = self.out_name(n, i)?;
            let v = self.g.add_value(name.clone(), None);
            self.vals.insert(name, Val::T(v));
            outs.push(v);
        }
        Builder::new(&mut self.g, &n.name).op_into("", op, inputs, outs.clone()).map_err(|e| n.err(e.to_string()))?;
        Ok(outs)
    }

    fn finish(&mut self, n: &N, op: Op, inputs: &[Option<ValueId>]) -> R<()> {
        self.finish_outputs(n, op, inputs, 1).map(|_| ())
    }

    /// Outputs `from..` of `n` are not computed (saved statistics, pooling indices): reading one is an error
    /// saying `why`.
    fn not_computed(&mut self, n: &N, from: usize, why: &str) -> R<()> {
        for i in from..self.output_names(n).len() {
            let name = self.out_name(n, i)?;
            self.vals.insert(name, Val::Missing(why.into()));
        }
        Ok(())
    }

    /// Output `i` of `n` is `v` (no node: an alias of what is already computed).
    fn alias(&mut self, n: &N, i: usize, v: ValueId) -> R<()> {
        let name = self.out_name(n, i)?;
        self.vals.insert(name, Val::T(v));
        Ok(())
    }

    fn cast(&mut self, n: &N, v: ValueId, from: DType, to: DType) -> R<ValueId> {
        if from == to {
            return Ok(v);
        }
        self.emit(n, "cast", Op::cast(to), &[Some(v)])
    }

    /// Argument `key` as a tensor of dtype `dt`: a tensor cast where its dtype differs, a number as a constant.
    fn operand(&mut self, n: &N, key: &str, dt: DType) -> R<ValueId> {
        if self.tensor_name(n, key).is_some() {
            let v = self.t(n, key)?;
            let (from, _) = self.arg_meta(n, key)?;
            return self.cast(n, v, from, dt);
        }
        let x = self.number(n, key, None)?;
        Ok(self.scalar(n, dt, x))
    }

    /// The dtype of argument `key` if it is a tensor; a number's "kind" otherwise (int → I64, float → F32,
    /// bool → Bool), which only wins over a tensor's across categories.
    fn operand_dtype(&self, n: &N, key: &str) -> R<Option<DType>> {
        if self.tensor_name(n, key).is_some() {
            return Ok(Some(self.arg_meta(n, key)?.0));
        }
        Ok(None)
    }

    /// The tensor `x` (of shape `from`, where known) reshaped to the size torch recorded for output `i`.
    fn reshape_to_out(&mut self, n: &N, x: ValueId, i: usize, from: Option<Vec<usize>>) -> R<()> {
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
    fn transpose(&mut self, n: &N, x: ValueId, perm: Vec<usize>) -> R<()> {
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

    /// `mm(view(X), W)` (+ bias) where the view flattens X's leading dims: `MatMul(X, W)` (+ bias) over X's own
    /// shape, then viewed as the mm's output — the 3-D product a `linear` is, which the norm and epilogue folds
    /// of the ONNX path recognize.
    fn unflattened_mm(&mut self, n: &N, a: ValueId, w: ValueId, bias: Option<ValueId>, a_key: &str) -> R<Option<()>> {
        let Some((x, hx)) = self.origins.get(&a).cloned() else { return Ok(None) };
        let (_, a_shape) = self.arg_meta(n, a_key)?;
        let (_, out) = self.out_meta(n, 0)?;
        let r = hx.len();
        if r < 3 || a_shape.len() != 2 || hx[r - 1] != a_shape[1] || hx[..r - 1].iter().product::<usize>() != a_shape[0]
        {
            return Ok(None);
        }
        let mut p = self.emit(n, "product", Op::MatMul, &[Some(x), Some(w)])?;
        if let Some(b) = bias {
            p = self.emit(n, "bias", Op::Binary(BinaryOp::Add), &[Some(p), Some(b)])?;
        }
        let mut p_shape = hx[..r - 1].to_vec();
        p_shape.push(out[1]);
        self.reshape_to_out(n, p, 0, Some(p_shape))?;
        Ok(Some(()))
    }

    /// `bmm(view(A), view(B))` where the views flatten the same leading batch dims of A and B: `MatMul(A, B)`
    /// (then viewed as the bmm's output), or `None` when the operands are not such views.
    fn unflattened_bmm(&mut self, n: &N, a: ValueId, b: ValueId) -> R<Option<()>> {
        let (Some((sa, ha)), Some((sb, hb))) = (self.origins.get(&a).cloned(), self.origins.get(&b).cloned()) else {
            return Ok(None);
        };
        let (_, a_shape) = self.arg_meta(n, "self")?;
        let (_, b_shape) = self.arg_meta(n, "mat2")?;
        let r = ha.len();
        if r < 4 || hb.len() != r || ha[..r - 2] != hb[..r - 2] || a_shape.len() != 3 || b_shape.len() != 3 {
            return Ok(None);
        }
        let batch: usize = ha[..r - 2].iter().product();
        if ha[r - 2..] != a_shape[1..] || hb[r - 2..] != b_shape[1..] || batch != a_shape[0] || batch != b_shape[0] {
            return Ok(None);
        }
        let p = self.emit(n, "batched", Op::MatMul, &[Some(sa), Some(sb)])?;
        let mut p_shape = ha[..r - 2].to_vec();
        p_shape.extend([ha[r - 2], hb[r - 1]]);
        self.reshape_to_out(n, p, 0, Some(p_shape))?;
        Ok(Some(()))
    }

    fn dim(&self, n: &N, d: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        let v = if d < 0 { d + r.max(1) } else { d };
        if v < 0 || v >= r.max(1) {
            return Err(n.err(format!("dim {d} is out of range for rank {rank}")));
        }
        Ok(v as usize)
    }

    fn binary(&mut self, n: &N, op: BinaryOp, alpha: Option<f64>) -> R<()> {
        let (out_dt, _) = self.out_meta(n, 0)?;
        let compute = if op.returns_bool() {
            let a = self.operand_dtype(n, "self")?;
            let b = self.operand_dtype(n, "other")?;
            let scalar_kind = |key: &str| -> DType {
                match n.arg(key) {
                    Some(Argument::AsFloat(_)) => DType::F32,
                    Some(Argument::AsBool(_)) => DType::Bool,
                    _ => DType::I64,
                }
            };
            match (a, b) {
                (Some(a), Some(b)) => promote(a, b),
                (Some(a), None) => {
                    let s = scalar_kind("other");
                    if promote(a, s) != a && (s.is_float() != a.is_float()) {
                        s
                    } else {
                        a
                    }
                }
                (None, Some(b)) => b,
                (None, None) => DType::F32,
            }
        } else {
            out_dt
        };
        let (op, compute) = match op {
            // Bitwise and/or/xor of bools are the logical ops.
            BinaryOp::BitwiseAnd if compute == DType::Bool => (BinaryOp::And, compute),
            BinaryOp::BitwiseOr if compute == DType::Bool => (BinaryOp::Or, compute),
            BinaryOp::BitwiseXor if compute == DType::Bool => (BinaryOp::Xor, compute),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => (op, DType::Bool),
            _ => (op, compute),
        };
        let x = self.operand(n, "self", compute)?;
        let mut y = self.operand(n, "other", compute)?;
        if let Some(a) = alpha.filter(|&a| a != 1.0) {
            let a = self.scalar(n, compute, a);
            y = self.emit(n, "alpha", Op::Binary(BinaryOp::Mul), &[Some(y), Some(a)])?;
        }
        self.finish(n, Op::Binary(op), &[Some(x), Some(y)])
    }

    fn unary(&mut self, n: &N, op: UnaryOp) -> R<()> {
        let (out_dt, _) = self.out_meta(n, 0)?;
        let (in_dt, _) = self.arg_meta(n, "self")?;
        let x = self.t(n, "self")?;
        // Integer inputs of float functions (torch computes exp, sigmoid, ... of an int tensor in float).
        let x = if out_dt.is_float() { self.cast(n, x, in_dt, out_dt)? } else { x };
        self.finish(n, Op::Unary(op), &[Some(x)])
    }

    fn reduce(&mut self, n: &N, op: ReduceOp, dims_key: &str) -> R<()> {
        let (in_dt, shape) = self.arg_meta(n, "self")?;
        let (out_dt, _) = self.out_meta(n, 0)?;
        let keepdim = self.boolean(n, "keepdim", false)?;
        let dims = self.opt_ints(n, dims_key)?.unwrap_or_default();
        let mut axes: Vec<i64> = if dims.is_empty() {
            (0..shape.len() as i64).collect()
        } else {
            dims.iter().map(|&d| self.dim(n, d, shape.len()).map(|d| d as i64)).collect::<R<_>>()?
        };
        axes.sort();
        axes.dedup();
        let x = self.t(n, "self")?;
        // Sums of bools and ints accumulate in the output's dtype (torch promotes them to int64).
        let x = if out_dt != DType::Bool { self.cast(n, x, in_dt, out_dt)? } else { x };
        self.finish(n, Op::Reduce { op, axes: Some(axes), keepdims: keepdim, noop_with_empty_axes: false }, &[Some(x)])
    }

    /// `any`/`all` over `dim`: a max/min of the values as 0/1.
    fn any_all(&mut self, n: &N, any: bool) -> R<()> {
        let (in_dt, shape) = self.arg_meta(n, "self")?;
        let keepdim = self.boolean(n, "keepdim", false)?;
        let dims = match self.opt_ints(n, "dim")? {
            Some(d) if !d.is_empty() => d,
            _ => (0..shape.len() as i64).collect(),
        };
        let mut axes: Vec<i64> =
            dims.iter().map(|&d| self.dim(n, d, shape.len()).map(|d| d as i64)).collect::<R<_>>()?;
        axes.sort();
        axes.dedup();
        let x = self.t(n, "self")?;
        let b = self.cast(n, x, in_dt, DType::Bool)?;
        let f = self.emit(n, "as_int", Op::cast(DType::I32), &[Some(b)])?;
        let op = if any { ReduceOp::Max } else { ReduceOp::Min };
        let r = self.emit(
            n,
            "reduce",
            Op::Reduce { op, axes: Some(axes), keepdims: keepdim, noop_with_empty_axes: false },
            &[Some(f)],
        )?;
        self.finish(n, Op::cast(DType::Bool), &[Some(r)])
    }

    fn constant(&mut self, n: &N, value: f64) -> R<()> {
        let (dt, shape) = self.out_meta(n, 0)?;
        let numel: usize = shape.iter().product();
        if numel > 1 << 26 {
            return Err(n.err(format!("a constant of {numel} elements is too large to fold")));
        }
        let t = Tensor::from_f64(dt, shape, vec![value; numel]);
        let v = self.konst(n, "value", t);
        self.alias(n, 0, v)
    }

    fn window_pool(&self, n: &N, rank: usize) -> R<Window> {
        let spatial = rank.saturating_sub(2);
        let expand = |v: Vec<i64>, what: &str| -> R<Vec<usize>> {
            let v = if v.len() == 1 { vec![v[0]; spatial] } else { v };
            if v.len() != spatial || v.iter().any(|&x| x < 0) {
                return Err(n.err(format!("'{what}' {v:?} does not fit {spatial} spatial dims")));
            }
            Ok(v.into_iter().map(|x| x as usize).collect())
        };
        let kernel = expand(self.ints(n, "kernel_size", None)?, "kernel_size")?;
        let strides = match self.opt_ints(n, "stride")? {
            Some(s) if !s.is_empty() => expand(s, "stride")?,
            _ => kernel.clone(),
        };
        let pad = expand(self.ints(n, "padding", Some(vec![0]))?, "padding")?;
        let dilations = expand(self.ints(n, "dilation", Some(vec![1]))?, "dilation")?;
        let ceil_mode = self.boolean(n, "ceil_mode", false)?;
        Ok(Window {
            kernel,
            strides,
            pads: pad.iter().chain(&pad).copied().collect(),
            dilations,
            auto_pad: AutoPad::NotSet,
            ceil_mode,
        })
    }

    fn node(&mut self, n: &N) -> R<()> {
        let op = n.op.clone();
        let mut parts = op.split('.');
        let ns = parts.next().unwrap_or("");
        let base = parts.next().unwrap_or("");
        let overload = parts.next().unwrap_or("default");
        // In-place variants (the training IR keeps `relu_`, `add_`, `hardtanh_`): the graph is functional, so
        // they compute what their out-of-place forms do.
        let base = if base.ends_with('_') && !base.ends_with("__") { base.trim_end_matches('_') } else { base };
        let unsupported = || Pt2Error::UnsupportedOp { node: n.name.clone(), op: op.clone() };
        match ns {
            "_operator" | "builtins" | "math" => return self.sym_op(n, base),
            "aten" => {}
            "higher_order" if matches!(base, "wrap_with_set_grad_enabled" | "wrap_with_autocast") => {
                return self.inline_wrapper(n)
            }
            "higher_order" => {
                return Err(n.err(
                    "higher-order ops (control flow) are not supported: export a model without data-dependent \
                     control flow",
                ))
            }
            _ => return Err(unsupported()),
        }
        use BinaryOp as B;
        use UnaryOp as U;
        match base {
            // ---- bookkeeping ----
            "_assert_tensor_metadata"
            | "_assert_scalar"
            | "_assert_async"
            | "sym_constrain_range"
            | "sym_constrain_range_for_size"
            | "_print" => Ok(()),
            "sym_size" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())?;
                let name = self.out_name(n, 0)?;
                self.vals.insert(name, Val::Int(shape[d] as i64));
                Ok(())
            }
            "sym_numel" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let name = self.out_name(n, 0)?;
                self.vals.insert(name, Val::Int(shape.iter().product::<usize>() as i64));
                Ok(())
            }
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
                    return self.alias(n, 0, x);
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
                    return Ok(());
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
            // ---- elementwise ----
            "add" => {
                let alpha = self.number(n, "alpha", Some(1.0))?;
                self.binary(n, B::Add, Some(alpha))
            }
            "sub" => {
                let alpha = self.number(n, "alpha", Some(1.0))?;
                self.binary(n, B::Sub, Some(alpha))
            }
            "rsub" => {
                // other − alpha · self
                let (dt, _) = self.out_meta(n, 0)?;
                let alpha = self.number(n, "alpha", Some(1.0))?;
                let x = self.operand(n, "self", dt)?;
                let y = self.operand(n, "other", dt)?;
                let x = if alpha != 1.0 {
                    let a = self.scalar(n, dt, alpha);
                    self.emit(n, "alpha", Op::Binary(B::Mul), &[Some(x), Some(a)])?
                } else {
                    x
                };
                self.finish(n, Op::Binary(B::Sub), &[Some(y), Some(x)])
            }
            "mul" | "multiply" => self.binary(n, B::Mul, None),
            "div" | "divide" | "true_divide" => {
                let mode = self.string(n, "rounding_mode")?;
                match mode.as_deref() {
                    None => self.binary(n, B::Div, None),
                    Some(m @ ("floor" | "trunc")) => {
                        // In float, then rounded (exact for the integers f32 holds).
                        let (out_dt, _) = self.out_meta(n, 0)?;
                        let x = self.operand(n, "self", DType::F32)?;
                        let y = self.operand(n, "other", DType::F32)?;
                        let q = self.emit(n, "div", Op::Binary(B::Div), &[Some(x), Some(y)])?;
                        let r = if m == "floor" {
                            self.emit(n, "floor", Op::Unary(U::Floor), &[Some(q)])?
                        } else {
                            // trunc(q) = sign(q) · floor(|q|)
                            let a = self.emit(n, "abs", Op::Unary(U::Abs), &[Some(q)])?;
                            let f = self.emit(n, "floor", Op::Unary(U::Floor), &[Some(a)])?;
                            let s = self.emit(n, "sign", Op::Unary(U::Sign), &[Some(q)])?;
                            self.emit(n, "trunc", Op::Binary(B::Mul), &[Some(s), Some(f)])?
                        };
                        if out_dt == DType::F32 {
                            self.alias(n, 0, r)
                        } else {
                            self.finish(n, Op::cast(out_dt), &[Some(r)])
                        }
                    }
                    Some(m) => Err(n.err(format!("rounding_mode '{m}'"))),
                }
            }
            "floor_divide" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let x = self.operand(n, "self", DType::F32)?;
                let y = self.operand(n, "other", DType::F32)?;
                let q = self.emit(n, "div", Op::Binary(B::Div), &[Some(x), Some(y)])?;
                let f = self.emit(n, "floor", Op::Unary(U::Floor), &[Some(q)])?;
                let f = self.cast(n, f, DType::F32, out_dt)?;
                self.alias(n, 0, f)
            }
            "pow" => {
                if self.tensor_name(n, "self").is_none() {
                    // pow.Scalar(self=number, exponent=tensor)
                    let (dt, _) = self.out_meta(n, 0)?;
                    let b = self.operand(n, "self", dt)?;
                    let e = self.operand(n, "exponent", dt)?;
                    return self.finish(n, Op::Binary(B::Pow), &[Some(b), Some(e)]);
                }
                let (dt, _) = self.out_meta(n, 0)?;
                let x = self.operand(n, "self", dt)?;
                let e = self.operand(n, "exponent", dt)?;
                self.finish(n, Op::Binary(B::Pow), &[Some(x), Some(e)])
            }
            "maximum" | "max" if overload == "other" || base == "maximum" => self.binary(n, B::Max, None),
            "minimum" | "min" if overload == "other" || base == "minimum" => self.binary(n, B::Min, None),
            "fmod" => self.binary(n, B::Mod { fmod: true }, None),
            "remainder" => self.binary(n, B::Mod { fmod: false }, None),
            "eq" => self.binary(n, B::Equal, None),
            "lt" | "less" => self.binary(n, B::Less, None),
            "le" | "less_equal" => self.binary(n, B::LessOrEqual, None),
            "gt" | "greater" => self.binary(n, B::Greater, None),
            "ge" | "greater_equal" => self.binary(n, B::GreaterOrEqual, None),
            "ne" | "not_equal" => {
                // Not(Equal), compared in the promoted dtype.
                let (a, b) = (self.operand_dtype(n, "self")?, self.operand_dtype(n, "other")?);
                let dt = match (a, b) {
                    (Some(a), Some(b)) => promote(a, b),
                    (Some(a), None) if matches!(n.arg("other"), Some(Argument::AsFloat(_))) && !a.is_float() => {
                        DType::F32
                    }
                    (Some(a), None) => a,
                    (None, Some(b)) => b,
                    (None, None) => DType::F32,
                };
                let x = self.operand(n, "self", dt)?;
                let y = self.operand(n, "other", dt)?;
                let e = self.emit(n, "eq", Op::Binary(B::Equal), &[Some(x), Some(y)])?;
                self.finish(n, Op::Unary(U::Not), &[Some(e)])
            }
            "logical_and" | "__and__" | "bitwise_and" => self.binary(n, B::BitwiseAnd, None),
            "logical_or" | "__or__" | "bitwise_or" => self.binary(n, B::BitwiseOr, None),
            "logical_xor" | "__xor__" | "bitwise_xor" => self.binary(n, B::BitwiseXor, None),
            "logical_not" => {
                let (dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, dt, DType::Bool)?;
                self.finish(n, Op::Unary(U::Not), &[Some(x)])
            }
            "bitwise_not" => {
                let (dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                self.finish(n, Op::Unary(if dt == DType::Bool { U::Not } else { U::BitwiseNot }), &[Some(x)])
            }
            "where" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                if let Some(sm) = self.safe_softmax(n) {
                    let p = self.value(n, &sm)?;
                    let nan = self.emit(n, "isnan", Op::Unary(U::IsNaN), &[Some(p)])?;
                    let zero = self.scalar(n, out_dt, 0.0);
                    return self.finish(n, Op::Where, &[Some(nan), Some(zero), Some(p)]);
                }
                let c = self.t(n, "condition")?;
                let (cdt, _) = self.arg_meta(n, "condition")?;
                let c = self.cast(n, c, cdt, DType::Bool)?;
                let x = self.operand(n, "self", out_dt)?;
                let y = self.operand(n, "other", out_dt)?;
                self.finish(n, Op::Where, &[Some(c), Some(x), Some(y)])
            }
            "masked_fill" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let x = self.t(n, "self")?;
                let m = self.t(n, "mask")?;
                let (mdt, _) = self.arg_meta(n, "mask")?;
                let m = self.cast(n, m, mdt, DType::Bool)?;
                let v = self.operand(n, "value", out_dt)?;
                self.finish(n, Op::Where, &[Some(m), Some(v), Some(x)])
            }
            "clamp" | "clip" | "clamp_min" | "clamp_max" | "hardtanh" | "relu6" => {
                let (lo, hi) = match base {
                    "hardtanh" => (self.number(n, "min_val", Some(-1.0))?, self.number(n, "max_val", Some(1.0))?),
                    "relu6" => (0.0, 6.0),
                    "clamp_min" => (self.number(n, "min", None)?, f64::INFINITY),
                    "clamp_max" => (f64::NEG_INFINITY, self.number(n, "max", None)?),
                    _ => {
                        if self.tensor_name(n, "min").is_some() || self.tensor_name(n, "max").is_some() {
                            return Err(n.err("clamp with tensor bounds is not supported"));
                        }
                        (
                            self.opt_number(n, "min")?.unwrap_or(f64::NEG_INFINITY),
                            self.opt_number(n, "max")?.unwrap_or(f64::INFINITY),
                        )
                    }
                };
                // Finite bounds: WGSL has no infinities in constants.
                let (lo, hi) = (lo.max(f32::MIN as f64) as f32, hi.min(f32::MAX as f64) as f32);
                self.unary(n, U::Clip(lo, hi))
            }
            "relu" => self.unary(n, U::Relu),
            "sigmoid" => self.unary(n, U::Sigmoid),
            "tanh" => self.unary(n, U::Tanh),
            "exp" => self.unary(n, U::Exp),
            "log" => self.unary(n, U::Log),
            "sqrt" => self.unary(n, U::Sqrt),
            "abs" => self.unary(n, U::Abs),
            "neg" | "negative" => self.unary(n, U::Neg),
            "reciprocal" => self.unary(n, U::Reciprocal),
            "erf" => self.unary(n, U::Erf),
            "sin" => self.unary(n, U::Sin),
            "cos" => self.unary(n, U::Cos),
            "tan" => self.unary(n, U::Tan),
            "asin" => self.unary(n, U::Asin),
            "acos" => self.unary(n, U::Acos),
            "atan" => self.unary(n, U::Atan),
            "sinh" => self.unary(n, U::Sinh),
            "cosh" => self.unary(n, U::Cosh),
            "floor" => self.unary(n, U::Floor),
            "ceil" => self.unary(n, U::Ceil),
            "round" if overload == "default" => self.unary(n, U::Round),
            "sign" => self.unary(n, U::Sign),
            "isnan" => self.unary(n, U::IsNaN),
            "hardswish" => self.unary(n, U::HardSwish),
            "hardsigmoid" => self.unary(n, U::HardSigmoid(1.0 / 6.0, 0.5)),
            "mish" => self.unary(n, U::Mish),
            "silu" => self.unary(n, U::Swish(1.0)),
            "softplus" => {
                if self.number(n, "beta", Some(1.0))? != 1.0 {
                    return Err(n.err("softplus with beta other than 1 is not supported"));
                }
                self.unary(n, U::Softplus)
            }
            "leaky_relu" => {
                let s = self.number(n, "negative_slope", Some(0.01))? as f32;
                self.unary(n, U::LeakyRelu(s))
            }
            "elu" => {
                let alpha = self.number(n, "alpha", Some(1.0))? as f32;
                if self.number(n, "scale", Some(1.0))? != 1.0 || self.number(n, "input_scale", Some(1.0))? != 1.0 {
                    return Err(n.err("elu with a scale is not supported"));
                }
                self.unary(n, U::Elu(alpha))
            }
            "gelu" => match self.string(n, "approximate")?.as_deref() {
                None | Some("none") => self.unary(n, U::Gelu),
                Some("tanh") => self.unary(n, U::GeluTanh),
                Some(a) => Err(n.err(format!("approximate '{a}'"))),
            },
            "rsqrt" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let (in_dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                let s = self.emit(n, "sqrt", Op::Unary(U::Sqrt), &[Some(x)])?;
                self.finish(n, Op::Unary(U::Reciprocal), &[Some(s)])
            }
            "log1p" | "expm1" | "log2" | "log10" | "exp2" => {
                let (out_dt, _) = self.out_meta(n, 0)?;
                let (in_dt, _) = self.arg_meta(n, "self")?;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                match base {
                    "log1p" => {
                        let one = self.scalar(n, out_dt, 1.0);
                        let y = self.emit(n, "plus1", Op::Binary(B::Add), &[Some(x), Some(one)])?;
                        self.finish(n, Op::Unary(U::Log), &[Some(y)])
                    }
                    "expm1" => {
                        let e = self.emit(n, "exp", Op::Unary(U::Exp), &[Some(x)])?;
                        let one = self.scalar(n, out_dt, 1.0);
                        self.finish(n, Op::Binary(B::Sub), &[Some(e), Some(one)])
                    }
                    "exp2" => {
                        let two = self.scalar(n, out_dt, 2.0);
                        self.finish(n, Op::Binary(B::Pow), &[Some(two), Some(x)])
                    }
                    _ => {
                        let l = self.emit(n, "ln", Op::Unary(U::Log), &[Some(x)])?;
                        let k = self.scalar(
                            n,
                            out_dt,
                            if base == "log2" { std::f64::consts::LOG2_E } else { std::f64::consts::LOG10_E },
                        );
                        self.finish(n, Op::Binary(B::Mul), &[Some(l), Some(k)])
                    }
                }
            }
            // ---- reductions ----
            "sum" => self.reduce(n, ReduceOp::Sum, "dim"),
            "mean" => self.reduce(n, ReduceOp::Mean, "dim"),
            "amax" => self.reduce(n, ReduceOp::Max, "dim"),
            "amin" => self.reduce(n, ReduceOp::Min, "dim"),
            "prod" => self.reduce(n, ReduceOp::Prod, "dim"),
            "logsumexp" => self.reduce(n, ReduceOp::LogSumExp, "dim"),
            "any" => self.any_all(n, true),
            "all" => self.any_all(n, false),
            "max" | "min" if overload == "dim" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let keepdim = self.boolean(n, "keepdim", false)?;
                let x = self.t(n, "self")?;
                let is_max = base == "max";
                let op = if is_max { ReduceOp::Max } else { ReduceOp::Min };
                let vals = self.out_name(n, 0)?;
                let v = self.emit(
                    n,
                    "values",
                    Op::Reduce { op, axes: Some(vec![d]), keepdims: keepdim, noop_with_empty_axes: false },
                    &[Some(x)],
                )?;
                self.vals.insert(vals, Val::T(v));
                let idx = self.emit(
                    n,
                    "indices",
                    Op::ArgReduce { max: is_max, axis: d, keepdims: keepdim, select_last: false },
                    &[Some(x)],
                )?;
                self.alias(n, 1, idx)
            }
            "max" | "min" => self.reduce(n, if base == "max" { ReduceOp::Max } else { ReduceOp::Min }, "dim"),
            "argmax" | "argmin" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let keepdim = self.boolean(n, "keepdim", false)?;
                let x = self.t(n, "self")?;
                let (x, d) = match self.opt_int(n, "dim")? {
                    Some(d) => (x, self.dim(n, d, shape.len())? as i64),
                    None => {
                        let s = self.ints_const(n, &[-1]);
                        (self.emit(n, "flat", Op::Reshape { allowzero: false }, &[Some(x), Some(s)])?, 0)
                    }
                };
                let a = self.emit(
                    n,
                    "arg",
                    Op::ArgReduce { max: base == "argmax", axis: d, keepdims: keepdim, select_last: false },
                    &[Some(x)],
                )?;
                self.reshape_to_out(n, a, 0, None)
            }
            "cumsum" | "cumprod" => {
                let (in_dt, shape) = self.arg_meta(n, "self")?;
                let (out_dt, _) = self.out_meta(n, 0)?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                let a = self.konst(n, "axis", Tensor::i64(vec![], vec![d]));
                self.finish(
                    n,
                    Op::CumSum { axis: None, exclusive: false, reverse: false, prod: base == "cumprod" },
                    &[Some(x), Some(a)],
                )
            }
            "_softmax" | "softmax" | "_log_softmax" | "log_softmax" => {
                let (in_dt, shape) = self.arg_meta(n, "self")?;
                let (out_dt, _) = self.out_meta(n, 0)?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let x = self.t(n, "self")?;
                let x = self.cast(n, x, in_dt, out_dt)?;
                self.finish(n, Op::Softmax { axis: d, legacy: false, log: base.contains("log") }, &[Some(x)])
            }
            // ---- contractions ----
            "mm" | "bmm" | "matmul" => {
                let x = self.t(n, "self")?;
                let y = self.t(n, if base == "matmul" { "other" } else { "mat2" })?;
                if base == "bmm" && self.unflattened_bmm(n, x, y)?.is_some() {
                    return Ok(());
                }
                if base == "mm" && self.unflattened_mm(n, x, y, None, "self")?.is_some() {
                    return Ok(());
                }
                self.finish(n, Op::MatMul, &[Some(x), Some(y)])
            }
            "addmm" => {
                let alpha = self.number(n, "alpha", Some(1.0))? as f32;
                let beta = self.number(n, "beta", Some(1.0))? as f32;
                let c = self.t(n, "self")?;
                let a = self.t(n, "mat1")?;
                let b = self.t(n, "mat2")?;
                if alpha == 1.0 && beta == 1.0 && self.unflattened_mm(n, a, b, Some(c), "mat1")?.is_some() {
                    return Ok(());
                }
                self.finish(n, Op::Gemm { alpha, beta, trans_a: false, trans_b: false }, &[Some(a), Some(b), Some(c)])
            }
            "baddbmm" => {
                let alpha = self.number(n, "alpha", Some(1.0))?;
                let beta = self.number(n, "beta", Some(1.0))?;
                let (dt, _) = self.out_meta(n, 0)?;
                let c = self.t(n, "self")?;
                let p = self.emit(n, "bmm", Op::MatMul, &[Some(self.t(n, "batch1")?), Some(self.t(n, "batch2")?)])?;
                let p = if alpha != 1.0 {
                    let a = self.scalar(n, dt, alpha);
                    self.emit(n, "alpha", Op::Binary(B::Mul), &[Some(p), Some(a)])?
                } else {
                    p
                };
                let c = if beta != 1.0 {
                    let b = self.scalar(n, dt, beta);
                    self.emit(n, "beta", Op::Binary(B::Mul), &[Some(c), Some(b)])?
                } else {
                    c
                };
                self.finish(n, Op::Binary(B::Add), &[Some(p), Some(c)])
            }
            "linear" => {
                let x = self.t(n, "input")?;
                let w = self.t(n, "weight")?;
                let (_, xs) = self.arg_meta(n, "input")?;
                let bias = self.opt_t(n, "bias")?;
                if xs.len() == 2 {
                    if let Some(b) = bias {
                        return self.finish(
                            n,
                            Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true },
                            &[Some(x), Some(w), Some(b)],
                        );
                    }
                }
                let wt = self.emit(n, "weight_t", Op::Transpose { perm: Some(vec![1, 0]) }, &[Some(w)])?;
                match bias {
                    None => self.finish(n, Op::MatMul, &[Some(x), Some(wt)]),
                    Some(b) => {
                        let p = self.emit(n, "matmul", Op::MatMul, &[Some(x), Some(wt)])?;
                        self.finish(n, Op::Binary(B::Add), &[Some(p), Some(b)])
                    }
                }
            }
            "convolution" | "conv1d" | "conv2d" | "_convolution" => {
                let x = self.t(n, "input")?;
                let w = self.t(n, "weight")?;
                let b = self.opt_t(n, "bias")?;
                let (_, ws) = self.arg_meta(n, "weight")?;
                let spatial = ws.len().saturating_sub(2);
                let expand = |v: Vec<i64>, what: &str| -> R<Vec<usize>> {
                    let v = if v.len() == 1 { vec![v[0]; spatial] } else { v };
                    if v.len() != spatial || v.iter().any(|&x| x < 0) {
                        return Err(n.err(format!("'{what}' {v:?} does not fit {spatial} spatial dims")));
                    }
                    Ok(v.into_iter().map(|x| x as usize).collect())
                };
                let strides = expand(self.ints(n, "stride", Some(vec![1]))?, "stride")?;
                let dilations = expand(self.ints(n, "dilation", Some(vec![1]))?, "dilation")?;
                let group = self.int(n, "groups", Some(1))?.max(1) as usize;
                let (pads, auto_pad) = match n.arg("padding") {
                    Some(Argument::AsString(s)) => match s.as_str() {
                        "same" => (vec![], AutoPad::SameUpper),
                        "valid" => (vec![], AutoPad::Valid),
                        other => return Err(n.err(format!("padding '{other}'"))),
                    },
                    _ => {
                        let p = expand(self.ints(n, "padding", Some(vec![0]))?, "padding")?;
                        (p.iter().chain(&p).copied().collect(), AutoPad::NotSet)
                    }
                };
                let window = Window { kernel: ws[2..].to_vec(), strides, pads, dilations, auto_pad, ceil_mode: false };
                if self.boolean(n, "transposed", false)? {
                    let output_padding = expand(self.ints(n, "output_padding", Some(vec![0]))?, "output_padding")?;
                    return self.finish(
                        n,
                        Op::ConvTranspose { window, group, output_padding, output_shape: vec![] },
                        &[Some(x), Some(w), b],
                    );
                }
                self.finish(n, Op::Conv { window, group }, &[Some(x), Some(w), b])
            }
            "max_pool2d_with_indices"
            | "max_pool2d"
            | "max_pool1d"
            | "max_pool3d"
            | "max_pool1d_with_indices"
            | "max_pool3d_with_indices" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let window = self.window_pool(n, shape.len())?;
                let x = self.t(n, "self")?;
                self.not_computed(n, 1, "MaxPool's indices are not computed by wgslc")?;
                self.finish(n, Op::Pool { kind: PoolKind::Max, window, count_include_pad: false }, &[Some(x)])
            }
            "avg_pool2d" | "avg_pool1d" | "avg_pool3d" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let window = self.window_pool(n, shape.len())?;
                if self.opt_int(n, "divisor_override")?.is_some() {
                    return Err(n.err("divisor_override is not supported"));
                }
                let count_include_pad = self.boolean(n, "count_include_pad", true)?;
                let x = self.t(n, "self")?;
                self.finish(n, Op::Pool { kind: PoolKind::Avg, window, count_include_pad }, &[Some(x)])
            }
            "adaptive_avg_pool2d" | "_adaptive_avg_pool2d" | "adaptive_avg_pool1d" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let (_, out) = self.out_meta(n, 0)?;
                let x = self.t(n, "self")?;
                let r = shape.len();
                if out[2..].iter().all(|&o| o == 1) {
                    let axes: Vec<i64> = (2..r as i64).collect();
                    return self.finish(
                        n,
                        Op::Reduce {
                            op: ReduceOp::Mean,
                            axes: Some(axes),
                            keepdims: true,
                            noop_with_empty_axes: false,
                        },
                        &[Some(x)],
                    );
                }
                if shape[2..].iter().zip(&out[2..]).any(|(&i, &o)| o == 0 || i % o != 0) {
                    return Err(n.err(format!(
                        "adaptive pooling from {:?} to {:?}: only sizes that divide evenly are supported",
                        &shape[2..],
                        &out[2..]
                    )));
                }
                let kernel: Vec<usize> = shape[2..].iter().zip(&out[2..]).map(|(&i, &o)| i / o).collect();
                let window = Window {
                    kernel: kernel.clone(),
                    strides: kernel,
                    pads: vec![0; 2 * (r - 2)],
                    dilations: vec![1; r - 2],
                    auto_pad: AutoPad::NotSet,
                    ceil_mode: false,
                };
                self.finish(n, Op::Pool { kind: PoolKind::Avg, window, count_include_pad: false }, &[Some(x)])
            }
            // ---- normalization ----
            "_native_batch_norm_legit_no_training"
            | "batch_norm"
            | "_native_batch_norm_legit"
            | "native_batch_norm" => {
                if base != "_native_batch_norm_legit_no_training" && self.boolean(n, "training", false)? {
                    return Err(n.err("BatchNorm in training mode: export after model.eval()"));
                }
                let eps = self.number(n, "eps", Some(1e-5))? as f32;
                let x = self.t(n, "input")?;
                let (dt, shape) = self.arg_meta(n, "input")?;
                let c = shape.get(1).copied().unwrap_or(1);
                let ones = |s: &mut Self, v: f64| s.konst(n, "affine", Tensor::from_f64(dt, vec![c], vec![v; c]));
                let w = match self.opt_t(n, "weight")? {
                    Some(w) => w,
                    None => ones(self, 1.0),
                };
                let b = match self.opt_t(n, "bias")? {
                    Some(b) => b,
                    None => ones(self, 0.0),
                };
                let mean = self.t(n, "running_mean")?;
                let var = self.t(n, "running_var")?;
                self.not_computed(n, 1, "BatchNorm's saved statistics are not computed")?;
                self.finish(n, Op::BatchNorm { epsilon: eps }, &[Some(x), Some(w), Some(b), Some(mean), Some(var)])
            }
            "native_layer_norm" | "layer_norm" | "rms_norm" => {
                let x = self.t(n, "input")?;
                let (dt, shape) = self.arg_meta(n, "input")?;
                let normalized = self.ints(n, "normalized_shape", None)?;
                let k = normalized.len();
                if k == 0 || k > shape.len() {
                    return Err(n.err(format!("normalized_shape {normalized:?} does not fit {shape:?}")));
                }
                let rms = base == "rms_norm";
                let eps = match self.opt_number(n, "eps")? {
                    Some(e) => e as f32,
                    None if rms => f32::EPSILON,
                    None => 1e-5,
                };
                let tail: Vec<usize> = shape[shape.len() - k..].to_vec();
                let numel: usize = tail.iter().product();
                let w = match self.opt_t(n, "weight")? {
                    Some(w) => w,
                    None => self.konst(n, "ones", Tensor::from_f64(dt, tail.clone(), vec![1.0; numel])),
                };
                let b = if rms { None } else { self.opt_t(n, "bias")? };
                self.not_computed(n, 1, "LayerNorm's saved statistics are not computed")?;
                self.finish(n, Op::LayerNorm { axis: -(k as i64), epsilon: eps, rms }, &[Some(x), Some(w), b])
            }
            "scaled_dot_product_attention" => {
                if self.number(n, "dropout_p", Some(0.0))? != 0.0 {
                    return Err(n.err("dropout_p other than 0 (training) is not supported"));
                }
                let q = self.t(n, "query")?;
                let k = self.t(n, "key")?;
                let v = self.t(n, "value")?;
                let (_, qs) = self.arg_meta(n, "query")?;
                let (_, ks) = self.arg_meta(n, "key")?;
                if qs.len() != 4 || ks.len() != 4 {
                    return Err(n.err("only 4-D query, key and value ([batch, heads, seq, dim]) are supported"));
                }
                let mask = self.opt_t(n, "attn_mask")?;
                let scale = self.opt_number(n, "scale")?.map(|s| s as f32);
                let attrs = AttentionAttrs {
                    is_causal: self.boolean(n, "is_causal", false)?,
                    q_num_heads: None,
                    kv_num_heads: None,
                    scale,
                    softcap: 0.0,
                    qk_matmul_output_mode: 0,
                };
                self.finish(n, Op::Attention(attrs), &[Some(q), Some(k), Some(v), mask])
            }
            // ---- indexing ----
            "embedding" => {
                let w = self.t(n, "weight")?;
                let i = self.t(n, "indices")?;
                self.finish(n, Op::Gather { axis: 0 }, &[Some(w), Some(i)])
            }
            "gather" => {
                let (_, shape) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", None)?, shape.len())? as i64;
                let x = self.t(n, "self")?;
                let i = self.t(n, "index")?;
                self.finish(n, Op::GatherElements { axis: d }, &[Some(x), Some(i)])
            }
            "index" => self.index(n),
            "tril" | "triu" => {
                let x = self.t(n, "self")?;
                let k = self.int(n, "diagonal", Some(0))?;
                let kc = self.konst(n, "diagonal", Tensor::i64(vec![], vec![k]));
                self.finish(n, Op::Trilu { upper: base == "triu", k: None }, &[Some(x), Some(kc)])
            }
            "diff" => {
                if self.int(n, "n", Some(1))? != 1 {
                    return Err(n.err("diff with n other than 1 is not supported"));
                }
                let (dt, shape) = self.out_meta(n, 0)?;
                let (_, xs) = self.arg_meta(n, "self")?;
                let d = self.dim(n, self.int(n, "dim", Some(-1))?, xs.len())? as i64;
                let mut parts = Vec::new();
                for key in ["prepend", "self", "append"] {
                    if let Some(v) = self.opt_t(n, key)? {
                        let (vdt, _) = self.arg_meta(n, key)?;
                        parts.push(Some(self.cast(n, v, vdt, dt)?));
                    }
                }
                let x = if parts.len() == 1 {
                    parts[0].unwrap()
                } else {
                    self.emit(n, "joined", Op::Concat { axis: d }, &parts)?
                };
                let len = shape[d as usize] as i64;
                let ax = self.ints_const(n, &[d]);
                let (s0, e0, s1, e1) = (
                    self.ints_const(n, &[1]),
                    self.ints_const(n, &[len + 1]),
                    self.ints_const(n, &[0]),
                    self.ints_const(n, &[len]),
                );
                let hi = self.emit(n, "hi", Op::Slice, &[Some(x), Some(s0), Some(e0), Some(ax)])?;
                let lo = self.emit(n, "lo", Op::Slice, &[Some(x), Some(s1), Some(e1), Some(ax)])?;
                let op = if dt == DType::Bool { B::Xor } else { B::Sub };
                self.finish(n, Op::Binary(op), &[Some(hi), Some(lo)])
            }
            _ => Err(unsupported()),
        }
    }

    /// `x[i0, i1, ...]` with index tensors (None for whole dims): adjacent indices select elements of the
    /// merged dims they cover, as a Gather over the row-major index `i0 · size1 + i1 + ...`.
    fn index(&mut self, n: &N) -> R<()> {
        let (_, shape) = self.arg_meta(n, "self")?;
        let idx: Vec<Option<String>> = match n.arg("indices") {
            Some(Argument::AsTensors(ts)) => ts.iter().map(|t| Some(t.name.clone())).collect(),
            Some(Argument::AsOptionalTensors(ts)) => ts
                .iter()
                .map(|t| match t {
                    OptionalTensor::AsTensor(t) => Some(t.name.clone()),
                    OptionalTensor::AsNone(_) => None,
                })
                .collect(),
            _ => return Err(n.err("argument 'indices' is not a tensor list")),
        };
        let used: Vec<usize> = idx.iter().enumerate().filter(|(_, t)| t.is_some()).map(|(i, _)| i).collect();
        let (Some(&first), Some(&last)) = (used.first(), used.last()) else {
            let x = self.t(n, "self")?;
            return self.alias(n, 0, x);
        };
        if last - first + 1 != used.len() {
            return Err(n.err("index tensors separated by a full slice (x[i, :, j]) are not supported"));
        }
        if last >= shape.len() {
            return Err(n.err("more indices than dims"));
        }
        let x = self.t(n, "self")?;
        let mut flat: Option<ValueId> = None;
        for (k, d) in used.iter().enumerate() {
            let name = idx[*d].clone().unwrap();
            let (dt, _) = self.meta(n, &name)?;
            if dt == DType::Bool {
                return Err(n.err("boolean-mask indexing (data-dependent shapes) is not supported"));
            }
            let v = self.value(n, &name)?;
            let v = self.cast(n, v, dt, DType::I64)?;
            if used.len() == 1 {
                flat = Some(v);
                break;
            }
            // Negative indices count from the end (Python's modulo).
            let size = self.konst(n, "size", Tensor::i64(vec![], vec![shape[*d] as i64]));
            let v = self.emit(n, "wrap", Op::Binary(BinaryOp::Mod { fmod: false }), &[Some(v), Some(size)])?;
            let stride: usize = used[k + 1..].iter().map(|&e| shape[e]).product();
            let v = if stride != 1 {
                let s = self.konst(n, "stride", Tensor::i64(vec![], vec![stride as i64]));
                self.emit(n, "scaled", Op::Binary(BinaryOp::Mul), &[Some(v), Some(s)])?
            } else {
                v
            };
            flat = Some(match flat {
                None => v,
                Some(f) => self.emit(n, "sum", Op::Binary(BinaryOp::Add), &[Some(f), Some(v)])?,
            });
        }
        let x = if used.len() > 1 {
            let mut merged: Vec<i64> = shape[..first].iter().map(|&s| s as i64).collect();
            merged.push(used.iter().map(|&d| shape[d] as i64).product());
            merged.extend(shape[last + 1..].iter().map(|&s| s as i64));
            let s = self.ints_const(n, &merged);
            self.emit(n, "merged", Op::Reshape { allowzero: true }, &[Some(x), Some(s)])?
        } else {
            x
        };
        let g = self.emit(n, "gather", Op::Gather { axis: first as i64 }, &[Some(x), flat])?;
        self.reshape_to_out(n, g, 0, None)
    }

    /// A higher-order op that only wraps a region (`torch.no_grad()` or autocast inside the model, as
    /// transformers' rotary embeddings do in the training-IR dialect): its subgraph inlined, its inputs bound to
    /// the operands, its outputs naming the subgraph's.
    fn inline_wrapper(&mut self, n: &N) -> R<()> {
        #[derive(serde::Deserialize)]
        struct GraphArgument {
            graph: schema::Graph,
        }
        let arg = n
            .node
            .inputs
            .iter()
            .find_map(|a| match &a.arg {
                Argument::AsGraph(v) => Some(v.clone()),
                _ => None,
            })
            .ok_or_else(|| n.err("no subgraph argument"))?;
        let sub = serde_json::from_value::<GraphArgument>(arg).map_err(|e| n.err(format!("its subgraph: {e}")))?.graph;
        let operands: Vec<ValueId> = n
            .node
            .inputs
            .iter()
            .filter_map(|a| match &a.arg {
                Argument::AsTensor(t) => Some(self.value(n, &t.name)),
                _ => None,
            })
            .collect::<R<_>>()?;
        if operands.len() != sub.inputs.len() {
            return Err(n.err(format!("{} operands for a subgraph of {} inputs", operands.len(), sub.inputs.len())));
        }
        for (input, v) in sub.inputs.iter().zip(operands) {
            let Argument::AsTensor(t) = input else { return Err(n.err("a subgraph input that is not a tensor")) };
            self.vals.insert(t.name.clone(), Val::T(v));
        }
        self.scopes.push(sub.tensor_values.clone());
        let r = self.nodes(&sub.nodes);
        self.scopes.pop();
        r?;
        let outs = self.output_names(n);
        if outs.len() != sub.outputs.len() {
            return Err(n.err(format!("{} outputs for a subgraph of {}", outs.len(), sub.outputs.len())));
        }
        for (o, so) in outs.into_iter().zip(&sub.outputs) {
            let Argument::AsTensor(t) = so else { return Err(n.err("a subgraph output that is not a tensor")) };
            let v = self
                .vals
                .get(&t.name)
                .cloned()
                .ok_or_else(|| n.err(format!("its subgraph never defines '{}'", t.name)))?;
            self.vals.insert(o, v);
        }
        Ok(())
    }

    /// Python arithmetic on SymInts (`_operator.mul(sym_size, 2)`), folded now that every size is known.
    fn sym_op(&mut self, n: &N, op: &str) -> R<()> {
        let vals: Vec<i64> = n
            .node
            .inputs
            .iter()
            .map(|a| match &a.arg {
                Argument::AsInt(v) => Ok(*v),
                Argument::AsSymInt(s) => self.sym_int(n, s),
                other => Err(n.err(format!("operand is {}, expected a SymInt", other.kind()))),
            })
            .collect::<R<_>>()?;
        let v = match (op, vals.as_slice()) {
            ("add", [a, b]) => a.wrapping_add(*b),
            ("sub", [a, b]) => a.wrapping_sub(*b),
            ("mul", [a, b]) => a.wrapping_mul(*b),
            ("floordiv", [a, b]) if *b != 0 => a.div_euclid(*b),
            ("mod", [a, b]) if *b != 0 => a.rem_euclid(*b),
            ("neg", [a]) => a.wrapping_neg(),
            ("max", [a, b]) => *a.max(b),
            ("min", [a, b]) => *a.min(b),
            _ => return Err(Pt2Error::UnsupportedOp { node: n.name.clone(), op: n.op.clone() }),
        };
        let name = self.out_name(n, 0)?;
        self.vals.insert(name, Val::Int(v));
        Ok(())
    }
}
