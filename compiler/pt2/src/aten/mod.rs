//! ATen ops → IR ops. Each node's arguments are read by the names torch's schema gives them (`self`, `dim`,
//! `keepdim`, ...), with the schema's defaults where the serializer left a keyword out; dtypes and shapes of
//! every tensor come from the graph's `tensor_values`, so type promotion is explicit: an operand whose dtype
//! differs from the one torch computes in is cast, and a Python scalar becomes a constant of that dtype.

use crate::schema::{self, Argument, Node, OptionalTensor, SymInt, SymIntArgument};
use crate::{dtype_of, sym, Pt2Error};
use std::collections::HashMap;
mod compute;
mod elementwise;
mod shapes;

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

    fn dim(&self, n: &N, d: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        let v = if d < 0 { d + r.max(1) } else { d };
        if v < 0 || v >= r.max(1) {
            return Err(n.err(format!("dim {d} is out of range for rank {rank}")));
        }
        Ok(v as usize)
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
            _ => {
                if self.shapes(n, base, overload)?
                    || self.elementwise(n, base, overload)?
                    || self.compute(n, base, overload)?
                {
                    Ok(())
                } else {
                    Err(unsupported())
                }
            }
        }
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
