//! Decoder models with a KV cache (`--kv-cache`): one graph holding both steps that generation replays, built from
//! any frontend's import of the model.
//!
//! A decoder exported with its cache as inputs and outputs (`past_key_values.N.key` → `present.N.key`, the names
//! HF/optimum and torch exports use) is compiled at fixed shapes: the cache inputs hold `rows = capacity - 1`
//! rows, a *decode* step takes one token and a *prefill* step `chunk` tokens. Each step sees the cache as a window:
//! rows `0..pos` hold the tokens so far, rows `pos..rows` are masked out through `attention_mask` (which is why
//! the loop must own that input), and the step's own tokens come after the window, at rows `rows..rows+tokens`,
//! where the model's causal mask (built from the shapes) places them. Attention over keys is invariant under
//! moving keys together with their mask, so every real token sees exactly the keys it would see in a cache of
//! `pos` rows; the model's positions come from `position_ids` (or from the mask, where the driver's layout proof
//! shows them right), never from the window's shape. After a step the
//! runtime copies its new rows into the cache at `pos`.
//!
//! When every cache is written as `Concat(past, new)` and nothing else reads its data (Shape nodes may size masks
//! from it), the decode step writes in place instead: the cache inputs hold `capacity` rows, the decode step's
//! Concats become [`Op::CacheWrite`]s that write the token's rows at row `wgslc.cache_row` (the token's position)
//! and attend over the whole cache, the loop unmasking rows `0..=pos`; every other reader, the prefill step
//! included, reads the window of the first `rows` rows (a Slice, a view). No kernel copies a cache and the runtime
//! copies no decode rows.
//!
//! With [`CacheLayout::Positions`] (chosen by the driver when the model's mask does not move with the window's
//! keys: one that compares a key's index with `position_ids`) the prefill step writes in place too, at its
//! chunk's first position, and attends over the whole cache, so every key sits at its position; the capacity is
//! rounded up to a multiple of the chunk.
//!
//! The frontend imports the model once per step, at the shapes [`DecoderPlan::step_shapes`] gives (so a frontend
//! that bakes shapes in at import, as `.pt2`'s does, is as good as one that infers them later); [`DecoderPlan::
//! build`] rewrites each step's graph and merges them into one: the prefill step's values and nodes prefixed
//! `prefill/`, the cache inputs, the sampling inputs and equal constants (the weights) shared, each step ending in
//! an `ArgMax` over its last real token's logits (`next_token`) and in a [`Op::Sample`] over them
//! (`wgslc.sampled_token`: top-k and temperature from the shared inputs `wgslc.temperature` and `wgslc.sampling`),
//! and each `present` output reduced to the step's new rows where the model writes it as `Concat(past, new)` (the
//! runtime copies those rows; the full concatenation stays internal).

use crate::PassError;
use std::collections::{HashMap, HashSet};
use wgslc_ir::{DType, Graph, NodeId, Op, ReduceOp, Signature, Tensor, TensorType, ValueId};

mod last_row;
mod positions;
pub use last_row::prefill_head_on_last_row;
use last_row::LAST_LOGITS;
use positions::{bypass_copies, positions_from_row};

/// The prefix of the prefill step's names.
pub const PREFILL: &str = "prefill/";
/// The sampling inputs both steps share (see [`DecoderLayout`]).
const TEMPERATURE: &str = "wgslc.temperature";
const SAMPLING: &str = "wgslc.sampling";
/// The row input of a step that writes its cache in place (see [`StepLayout::cache_row`]).
const CACHE_ROW: &str = "wgslc.cache_row";
const LAST_INDEX: &str = "wgslc.last_index";
/// The token history (see [`DecoderLayout::tokens`]).
const TOKENS: &str = "wgslc.tokens";

/// What `--kv-cache` asks for.
#[derive(Clone, Debug)]
pub struct KvCache {
    /// Tokens the cache holds: prompt plus generated.
    pub capacity: usize,
    /// Tokens per prefill step.
    pub chunk: usize,
    /// Extra state pairs `(output, input)` for names other than `present.N.*` ↔ `past_key_values.N.*`.
    pub state: Vec<(String, String)>,
    /// Inputs given a value at compile time (`--const`): neither cache nor loop inputs, shared by both steps.
    pub fixed: HashSet<String>,
}

/// Where a step's own keys sit in the cache it attends over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLayout {
    /// The prefill step reads the cache's first `rows` rows as a window and its own keys come after them (rows
    /// `rows..rows+tokens`, not their positions); its new rows are copied into the cache after it. Exact for masks
    /// that move with the keys (built from the shapes, or from `cache_position`).
    Window,
    /// Every step writes its new rows into the cache in place at their positions and attends over the whole
    /// cache, so a key's index is its position (masks that compare a key's index with `position_ids`). Needs
    /// every cache written as `Concat(past, new)` and read by nothing else; the capacity is rounded up to a
    /// multiple of the prefill chunk, so that a chunk starting below the capacity ends within it.
    Positions,
}

/// Where the loop's tensors are in the rewritten graph, by name.
#[derive(Clone, Debug)]
pub struct DecoderLayout {
    pub cache: CacheLayout,
    /// Cache inputs (shared by both steps) and the axis their rows run along.
    pub state: Vec<(String, usize)>,
    /// The sampling inputs shared by both steps: the temperature (float `[1]`) and the top-k and seed (int64 `[2]`).
    pub temperature: String,
    pub sampling: String,
    /// The token history (int64 `[rows + 1]`), an input no node reads: generation writes the prompt into it and
    /// each step's chosen token after it, on the GPU.
    pub tokens: String,
    pub steps: Vec<StepLayout>,
    /// Rows of the cache the prefill step sees (`capacity - 1`); the cache inputs hold `rows + 1` when the
    /// decode step writes in place (`StepLayout::cache_row`), `rows` otherwise.
    pub rows: usize,
}

#[derive(Clone, Debug)]
pub struct StepLayout {
    pub name: &'static str,
    pub tokens: usize,
    pub input_ids: String,
    pub attention_mask: String,
    pub position_ids: Option<String>,
    pub cache_position: Option<String>,
    pub last_index: Option<String>,
    pub logits: String,
    pub next_token: String,
    /// The token drawn by `Sample` from the same logits, keyed by the step's last position.
    pub sampled_token: String,
    /// Per state entry: the output with the step's rows, and the row of it where the step's first token is.
    /// Empty when the step writes the cache in place.
    pub present: Vec<(String, usize)>,
    /// The input (integers, one element) holding the row at which the step writes its token's cache rows in
    /// place: the decode step's, when every cache is written as `Concat(past, new)` and read by nothing else.
    pub cache_row: Option<String>,
}

const ROLES: [&str; 4] = ["input_ids", "attention_mask", "position_ids", "cache_position"];
/// optimum's merged decoders (`decoder_model_merged.onnx`) choose between their two exports with this input: an
/// `If` runs the export that reads the past when it is true and the one without past inputs otherwise.
const USE_CACHE_BRANCH: &str = "use_cache_branch";

/// The inputs a decoder convention fixes that the user has not bound (`bound`): optimum's `use_cache_branch`, set
/// true. The in-place cache always gives a step a past (its unused rows masked out), so every step runs the branch
/// exported with past inputs — the graph the layout proof checks; the other branch is the same model exported
/// without them, which optimum's exporter validated against the first (a prompt's first step with an empty past).
pub fn convention_constants(sig: &Signature, bound: &HashSet<String>) -> Vec<(String, Tensor)> {
    sig.inputs
        .iter()
        .filter(|(n, d)| n == USE_CACHE_BRANCH && !bound.contains(n) && d.iter().all(|&s| s == Some(1)))
        .map(|(n, d)| (n.clone(), Tensor::bool(d.iter().flatten().copied().collect(), vec![true])))
        .collect()
}

fn bad(name: &str, reason: impl Into<String>) -> PassError {
    PassError::Input { name: name.to_string(), reason: reason.into() }
}

/// What a decoder's steps are imported at, decided from the model's signature alone.
#[derive(Clone, Debug)]
pub struct DecoderPlan {
    cache: CacheLayout,
    /// `(present output, past input)`, and each past input's row axis and declared dims.
    pairs: Vec<(String, String)>,
    /// Whether the pairs are by position (a `.pt2`'s outputs after the logits, in its cache inputs' order), which
    /// only a `Concat(past, new)` writing each output confirms.
    positional: bool,
    state: Vec<(String, usize)>,
    past_dims: Vec<Vec<Option<usize>>>,
    /// The loop inputs the model has, with their ranks.
    roles: Vec<(&'static str, usize)>,
    logits: String,
    /// The model's outputs, in order.
    outputs: Vec<String>,
    rows: usize,
    capacity: usize,
    chunk: usize,
}

/// The two steps, in the order the graph holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    Decode,
    Prefill,
}

impl StepKind {
    fn prefix(self) -> &'static str {
        match self {
            StepKind::Decode => "",
            StepKind::Prefill => PREFILL,
        }
    }
}

impl DecoderPlan {
    /// Checks the model's signature against what generation needs (its cache inputs paired with outputs, each
    /// with one symbolic row axis after the batch; `input_ids` and `attention_mask`; no other run-time input but
    /// `position_ids` and `cache_position`) and sizes the steps. A model without `position_ids` derives its
    /// positions from the mask or the shapes; the driver's layout proof checks them against the model's own.
    pub fn new(sig: &Signature, kv: &KvCache, cache: CacheLayout) -> Result<DecoderPlan, PassError> {
        if kv.capacity < 2 {
            return Err(bad(
                "past_key_values",
                format!("--kv-cache {} holds no generated token: use 2 or more", kv.capacity),
            ));
        }
        let chunk = kv.chunk.clamp(1, kv.capacity - 1);
        let capacity = match cache {
            CacheLayout::Window => kv.capacity,
            CacheLayout::Positions => kv.capacity.next_multiple_of(chunk),
        };
        let find = |name: &str| sig.inputs.iter().find(|(n, _)| n == name).map(|(_, d)| d);
        let (pairs, positional) = state_pairs(sig, kv)?;
        let mut state = Vec::new();
        let mut past_dims = Vec::new();
        for (_, past) in &pairs {
            let d = find(past).ok_or_else(|| bad(past, "a cache input must be a run-time input"))?;
            let sym: Vec<usize> = (1..d.len()).filter(|&i| d[i].is_none()).collect();
            let [axis] = sym[..] else {
                return Err(bad(
                    past,
                    format!(
                        "a cache input needs exactly one symbolic dim after the batch dim (its length), it has {} \
                         (bind the others with --dim NAME=SIZE)",
                        sym.len()
                    ),
                ));
            };
            if d.first().is_some_and(|b| b.is_some_and(|v| v != 1)) {
                return Err(bad(
                    past,
                    "--kv-cache generates with batch 1; the cache's batch dim is fixed at another size",
                ));
            }
            state.push((past.clone(), axis));
            past_dims.push(d.clone());
        }
        for r in ["input_ids", "attention_mask"] {
            if find(r).is_none() {
                let why = if r == "attention_mask" {
                    "the cache has a fixed capacity and its unused rows are masked out through it"
                } else {
                    "the loop feeds the tokens through it"
                };
                return Err(bad(r, format!("--kv-cache needs a model input named '{r}': {why}")));
            }
        }
        let states: HashSet<&str> = pairs.iter().map(|(_, p)| p.as_str()).collect();
        let loop_input = |n: &str| states.contains(n) || ROLES.contains(&n) || kv.fixed.contains(n);
        if let Some((other, _)) = sig.inputs.iter().find(|(n, _)| !loop_input(n)) {
            return Err(bad(
                other,
                format!(
                    "--kv-cache fills the inputs {} and the cache; the model also takes '{other}' (bind it with --const)",
                    ROLES.join(", "),
                ),
            ));
        }
        let mut roles = Vec::new();
        for r in ROLES {
            if let Some(d) = find(r) {
                if !(1..=2).contains(&d.len()) {
                    return Err(bad(r, format!("expected a rank-1 or rank-2 input, it has rank {}", d.len())));
                }
                roles.push((r, d.len()));
            }
        }
        let logits = sig
            .outputs
            .iter()
            .find(|o| *o == "logits" || (positional && Some(*o) == sig.outputs.first()))
            .or_else(|| sig.outputs.iter().find(|o| !pairs.iter().any(|(p, _)| p == *o)))
            .cloned()
            .ok_or_else(|| bad("logits", "--kv-cache needs a logits output"))?;
        let outputs = sig.outputs.clone();
        Ok(DecoderPlan {
            cache,
            pairs,
            positional,
            state,
            past_dims,
            roles,
            logits,
            outputs,
            rows: capacity - 1,
            capacity,
            chunk,
        })
    }

    /// Rows of the cache a step's import reads as its past: the window (`rows`), or for a prefill step that
    /// writes in place at its positions the cache less one chunk (so that its concatenation is the whole cache).
    fn past_len(&self, step: StepKind) -> usize {
        match (step, self.cache) {
            (StepKind::Prefill, CacheLayout::Positions) => self.capacity - self.chunk,
            _ => self.rows,
        }
    }

    fn tokens(&self, step: StepKind) -> usize {
        match step {
            StepKind::Decode => 1,
            StepKind::Prefill => self.chunk,
        }
    }

    /// The input shapes to import step `step` of the model at (names as the model has them).
    pub fn step_shapes(&self, step: StepKind) -> HashMap<String, Vec<usize>> {
        let (past, tokens) = (self.past_len(step), self.tokens(step));
        let mut shapes = HashMap::new();
        for ((name, axis), dims) in self.state.iter().zip(&self.past_dims) {
            let shape = dims.iter().enumerate().map(|(i, d)| if i == *axis { past } else { d.unwrap_or(1) }).collect();
            shapes.insert(name.clone(), shape);
        }
        for &(r, rank) in &self.roles {
            let len = if r == "attention_mask" { past + tokens } else { tokens };
            shapes.insert(r.to_string(), if rank == 1 { vec![len] } else { vec![1, len] });
        }
        shapes
    }

    /// Rewrites the two steps' imports (at [`Self::step_shapes`]) into one graph, and says where the loop's
    /// tensors are in it.
    pub fn build(&self, decode: Graph, prefill: Graph) -> Result<(Graph, DecoderLayout), PassError> {
        let (mut g, mut h) = (decode, prefill);
        name_outputs(&mut g, &self.outputs)?;
        name_outputs(&mut h, &self.outputs)?;
        for (_, past) in &self.pairs {
            bypass_copies(&mut g, past);
            bypass_copies(&mut h, past);
        }
        // Float16 caches kept float32 at the boundary become float16 inputs, alike in both steps.
        for (((present, past), (_, axis)), dims) in self.pairs.iter().zip(&self.state).zip(&self.past_dims) {
            let rank = dims.len();
            let (a, b) =
                (uncast_cache(&mut g, present, past, *axis, rank), uncast_cache(&mut h, present, past, *axis, rank));
            if a != b {
                return Err(bad(past, "the two steps' imports read this cache through different casts"));
            }
        }
        let (dc, pc) = (self.concats(&g)?, self.concats(&h)?);
        if self.positional {
            if let Some(((present, past), _)) = self.pairs.iter().zip(&dc).find(|(_, c)| c.is_none()) {
                return Err(bad(
                    past,
                    format!(
                        "paired with output '{present}' by position (the model names no present.N outputs), but that \
                         output is not Concat({past}, new rows) along the cache's axis: name the pairs with --state \
                         OUTPUT=INPUT"
                    ),
                ));
            }
        }
        // In place: every cache written as Concat(past, new) and its data read by nothing else.
        let in_place = dc.iter().all(Option::is_some) && self.pairs.iter().all(|(_, past)| exclusive(&g, past, &dc));
        let positions = self.cache == CacheLayout::Positions;
        let prefill_in_place =
            positions && pc.iter().all(Option::is_some) && self.pairs.iter().all(|(_, past)| exclusive(&h, past, &pc));
        if positions && !(in_place && prefill_in_place) {
            return Err(bad(
                &self.pairs[0].1,
                "the model's attention mask needs every key at its position in the cache, which wgslc gives only to \
                 caches written as Concat(past, new) and read by nothing else",
            ));
        }
        let cache_rows = if in_place { self.rows + 1 } else { self.rows };
        let decode = self.rewrite_step(&mut g, StepKind::Decode, &dc, in_place, in_place, cache_rows)?;
        let prefill = self.rewrite_step(&mut h, StepKind::Prefill, &pc, in_place && positions, in_place, cache_rows)?;
        if !decode.windows.is_empty() {
            return Err(bad(&self.pairs[0].1, "the decode step reads a window of its cache (a wgslc bug)"));
        }
        let shared: HashSet<String> =
            self.state.iter().map(|(s, _)| s.clone()).chain([TEMPERATURE.into(), SAMPLING.into()]).collect();
        let prefill_inputs = merge(&mut g, h, PREFILL, &shared, &prefill.windows)?;
        // Inputs: each step's loop inputs, then the caches and the sampling inputs both share.
        let mut inputs = decode.inputs.clone();
        inputs.extend(prefill_inputs.iter().copied().filter(|&v| !shared.contains(&g.value(v).name)));
        for s in self.state.iter().map(|(s, _)| s.as_str()).chain([TEMPERATURE, SAMPLING]) {
            inputs.push(input(&g, s).ok_or_else(|| bad(s, "a shared input missing after the merge (a wgslc bug)"))?);
        }
        inputs.push(g.add_value(TOKENS, Some(TensorType::new(DType::I64, vec![self.rows + 1]))));
        g.inputs = inputs;
        let layout = DecoderLayout {
            cache: self.cache,
            state: self.state.clone(),
            temperature: TEMPERATURE.into(),
            sampling: SAMPLING.into(),
            tokens: TOKENS.into(),
            steps: vec![decode.layout, prefill.layout],
            rows: self.rows,
        };
        Ok((g, layout))
    }

    /// Per state pair, the Concat writing `present` as `Concat(past, new)` along the cache's axis (under the Cast
    /// of an uncast float16 cache), with `new`.
    fn concats(&self, g: &Graph) -> Result<Vec<Option<(NodeId, ValueId)>>, PassError> {
        let mut out = Vec::new();
        for ((present, past), (_, axis)) in self.pairs.iter().zip(&self.state) {
            let rank = self.past_dims[out.len()].len() as i64;
            let (Some(p), Some(past)) = (named_output(g, present), input(g, past)) else {
                return Err(bad(past, format!("the imported model has no output '{present}' or no input '{past}'")));
            };
            let mut at = g.value(p).producer;
            // Through Identities (an If's outputs are its branch's results under the node's names).
            while let Some(n) = at.filter(|&n| matches!(g.node(n).op, Op::Identity)) {
                at = g.node(n).inputs[0].and_then(|x| g.value(x).producer);
            }
            if let Some(n) = at.filter(|&n| matches!(g.node(n).op, Op::Cast { to: DType::F32, .. })) {
                if let Some(x) = g.node(n).inputs[0] {
                    if g.value(x).producer.is_some_and(|c| matches!(g.node(c).op, Op::Concat { .. })) {
                        at = g.value(x).producer;
                    }
                }
            }
            out.push(at.and_then(|n| {
                let node = g.node(n);
                let Op::Concat { axis: a } = node.op else { return None };
                let matches_axis = a == *axis as i64 || a + rank == *axis as i64;
                (node.inputs.len() == 2 && node.inputs[0] == Some(past) && matches_axis)
                    .then(|| node.inputs[1].map(|new| (n, new)))
                    .flatten()
            }));
        }
        Ok(out)
    }

    /// One step's rewrite: its presents, its cache reads (in place, a window or the cache itself), its next token,
    /// its inputs and outputs.
    #[allow(clippy::too_many_arguments)]
    fn rewrite_step(
        &self,
        g: &mut Graph,
        kind: StepKind,
        concats: &[Option<(NodeId, ValueId)>],
        writes: bool,
        in_place: bool,
        cache_rows: usize,
    ) -> Result<StepRewrite, PassError> {
        let prefix = kind.prefix();
        let p = |s: &str| format!("{prefix}{s}");
        let past_len = self.past_len(kind);
        let int64 = |n: usize| Some(TensorType::new(DType::I64, vec![n]));
        let cache_row = writes.then(|| g.add_value(CACHE_ROW, int64(1)));
        let mut present_rows = Vec::new();
        let mut windows = Vec::new();
        // The cache's length as the import's Shape nodes give it (folded below), where a step with every key at its
        // position counts positions from it (see `positions_from_row`).
        let mut lengths = Vec::new();
        for (((present, past), (_, axis)), concat) in self.pairs.iter().zip(&self.state).zip(concats) {
            let past_v = input(g, past).expect("checked by concats");
            // present = Concat(past, new): the step's output is `new` alone.
            if let Some((_, new)) = concat {
                let old = named_output(g, present).expect("checked by concats");
                g.value_mut(old).name = format!("{present}/with_past");
                let rows = g.add_value(present.clone(), None);
                g.add_node(format!("{present}/new_rows"), Op::Identity, vec![Some(*new)], vec![rows])?;
                for o in g.outputs.iter_mut().filter(|o| **o == old) {
                    *o = rows;
                }
            }
            present_rows.push(if concat.is_some() { 0 } else { self.rows });
            // The cache as both steps share it: `cache_rows` rows.
            let ty = g.value(past_v).ty.clone().expect("an imported input is typed");
            let mut shape = ty.shape.clone();
            shape[*axis] = cache_rows;
            g.value_mut(past_v).ty = Some(TensorType::new(ty.dtype, shape));
            if !in_place {
                continue;
            }
            // Everything but an in-place write reads the window of the cache's first `past_len` rows: a Shape
            // node is the window's shape (folded here: the rows it counts are the import's), any other reader a
            // Slice of the cache (a view).
            let mut readers = Vec::new();
            for n in g.consumers(past_v).into_iter().filter(|&n| !writes || Some(n) != concat.map(|c| c.0)) {
                match g.node(n).op {
                    Op::Shape { start, end } => {
                        let r = ty.shape.len() as i64;
                        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                        let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
                        let dims: Vec<i64> = ty.shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
                        if (s..e).contains(axis) {
                            lengths.push((g.node(n).outputs[0], axis - s, e - s));
                        }
                        g.fold_node(n, vec![Tensor::i64(vec![dims.len()], dims)]);
                    }
                    _ => readers.push(n),
                }
            }
            if !readers.is_empty() {
                let window = g.add_value(format!("{past}/window"), None);
                let bound = |g: &mut Graph, what: &str, v: i64| {
                    g.add_const(format!("{past}/window/{what}"), Tensor::i64(vec![1], vec![v]))
                };
                let (s, e, a) =
                    (bound(g, "starts", 0), bound(g, "ends", past_len as i64), bound(g, "axes", *axis as i64));
                for n in readers {
                    let ins =
                        g.node(n).inputs.iter().map(|&i| if i == Some(past_v) { Some(window) } else { i }).collect();
                    g.set_inputs(n, ins);
                }
                windows.push(g.add_node(
                    format!("{past}/window"),
                    Op::Slice,
                    vec![Some(past_v), Some(s), Some(e), Some(a)],
                    vec![window],
                )?);
            }
            if writes {
                // The Concat becomes the write, where it was in the graph's order.
                let (c, new) = concat.expect("in place");
                g.node_mut(c).op = Op::CacheWrite { axis: *axis };
                g.set_inputs(c, vec![Some(past_v), Some(new), cache_row]);
            }
        }
        if let (Some(row), CacheLayout::Positions) = (cache_row, self.cache) {
            positions_from_row(g, &lengths, row)?;
        }
        // next_token = ArgMax(logits[:, last real token, :]) over the vocabulary; or a draw from them, keyed by the
        // position of the step's last real token (prefill pads with it).
        let logits =
            named_output(g, &self.logits).ok_or_else(|| bad(&self.logits, "the imported model lost its logits"))?;
        let last_index = (kind == StepKind::Prefill).then(|| g.add_value(LAST_INDEX, int64(1)));
        let row = match last_index {
            Some(li) => {
                let row = g.add_value(LAST_LOGITS, None);
                g.add_node(LAST_LOGITS, Op::Gather { axis: 1 }, vec![Some(logits), Some(li)], vec![row])?;
                row
            }
            None => logits,
        };
        let next = g.add_value("next_token", None);
        let argmax = Op::ArgReduce { max: true, axis: -1, keepdims: false, select_last: false };
        g.add_node("next_token", argmax, vec![Some(row)], vec![next])?;
        let temperature = g.add_value(TEMPERATURE, Some(TensorType::new(DType::F32, vec![1])));
        let sampling = g.add_value(SAMPLING, int64(2));
        // The counter keying the draw's random numbers: the token's position, or without position_ids the
        // number of keys the attention mask unmasks (it grows by one a token as well).
        let position = match input(g, "position_ids") {
            Some(p) => p,
            None => {
                let mask = input(g, "attention_mask").ok_or_else(|| bad("attention_mask", "the import lost it"))?;
                let keys = g.add_value("wgslc.sample_counter", None);
                let sum = Op::Reduce { op: ReduceOp::Sum, axes: None, keepdims: true, noop_with_empty_axes: false };
                g.add_node("wgslc.sample_counter", sum, vec![Some(mask)], vec![keys])?;
                keys
            }
        };
        let sampled = g.add_value("wgslc.sampled_token", None);
        g.add_node(
            "wgslc.sampled_token",
            Op::Sample,
            vec![Some(row), Some(temperature), Some(sampling), Some(position)],
            vec![sampled],
        )?;
        // The loop's inputs, typed as the step takes them.
        let mut inputs = Vec::new();
        for &(r, _) in &self.roles {
            inputs.push(input(g, r).ok_or_else(|| bad(r, "the imported model lost this input"))?);
        }
        inputs.extend(last_index);
        inputs.extend(cache_row);
        // A step that writes the cache in place has no present outputs (nothing reads them).
        let mut outputs: Vec<ValueId> = g
            .outputs
            .iter()
            .copied()
            .filter(|&o| !(writes && self.pairs.iter().any(|(present, _)| g.value(o).name == *present)))
            .collect();
        outputs.extend([next, sampled]);
        g.outputs = outputs;
        let state: Vec<ValueId> = self.state.iter().map(|(s, _)| input(g, s).expect("checked")).collect();
        g.inputs = inputs.iter().copied().chain(state).chain([temperature, sampling]).collect();
        let has = |r: &str| self.roles.iter().any(|(n, _)| *n == r);
        let layout = StepLayout {
            name: match kind {
                StepKind::Decode => "decode",
                StepKind::Prefill => "prefill",
            },
            tokens: self.tokens(kind),
            input_ids: p("input_ids"),
            attention_mask: p("attention_mask"),
            position_ids: has("position_ids").then(|| p("position_ids")),
            cache_position: has("cache_position").then(|| p("cache_position")),
            last_index: last_index.map(|_| p(LAST_INDEX)),
            logits: p(&self.logits),
            next_token: p("next_token"),
            sampled_token: p("wgslc.sampled_token"),
            present: if writes {
                vec![]
            } else {
                self.pairs.iter().zip(&present_rows).map(|((o, _), &r)| (p(o), r)).collect()
            },
            cache_row: cache_row.map(|_| p(CACHE_ROW)),
        };
        Ok(StepRewrite { layout, inputs, windows })
    }
}

/// Names each output value as the signature names the output (a frontend may name the value after the node that
/// computes it, as `.pt2`'s does); a value that already has such a name is renamed.
fn name_outputs(g: &mut Graph, names: &[String]) -> Result<(), PassError> {
    if g.outputs.len() != names.len() {
        return Err(bad(
            names.first().map_or("logits", String::as_str),
            format!("the model declares {} outputs and its import has {}", names.len(), g.outputs.len()),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        let v = g.outputs[i];
        if g.value(v).name == *name {
            continue;
        }
        if g.outputs[..i].contains(&v) {
            return Err(bad(name, "the model returns one tensor as two outputs"));
        }
        if let Some(other) = g.value_ids().find(|&o| g.value(o).name == *name) {
            let fresh = g.fresh_name(name);
            g.value_mut(other).name = fresh;
        }
        g.value_mut(v).name = name.clone();
    }
    Ok(())
}

/// What [`DecoderPlan::rewrite_step`] made of a step.
struct StepRewrite {
    /// The step's layout, names as they are after the merge.
    layout: StepLayout,
    /// Its loop inputs, in order.
    inputs: Vec<ValueId>,
    /// The Slice nodes that read its window of the cache, which the graph's order puts first (every reader of
    /// the cache waits for them).
    windows: Vec<NodeId>,
}

fn input(g: &Graph, name: &str) -> Option<ValueId> {
    g.inputs.iter().copied().find(|&v| g.value(v).name == name)
}

fn named_output(g: &Graph, name: &str) -> Option<ValueId> {
    g.outputs.iter().copied().find(|&v| g.value(v).name == name)
}

/// Whether nothing but its own Concat (and Shape nodes, which read no data) reads cache input `past`.
fn exclusive(g: &Graph, past: &str, concats: &[Option<(NodeId, ValueId)>]) -> bool {
    let Some(v) = input(g, past) else { return false };
    g.consumers(v)
        .into_iter()
        .all(|n| concats.iter().flatten().any(|&(c, _)| c == n) || matches!(g.node(n).op, Op::Shape { .. }))
}

/// The state pairs `(output, input)`: `present.N.key|value` ↔ `past_key_values.N.key|value` and those of
/// `--state`; or, where neither names one, by position: every input that is not a loop input or `--const` is a
/// cache, paired in order with the outputs after the first (the logits), when there are as many (a `.pt2`
/// exported from `forward(input_ids, attention_mask, position_ids, *past) -> (logits, *present)`, whose outputs
/// carry no names of the model's). Returns the pairs and whether they are by position.
fn state_pairs(sig: &Signature, kv: &KvCache) -> Result<(Vec<(String, String)>, bool), PassError> {
    let inputs: HashSet<&str> = sig.inputs.iter().map(|(n, _)| n.as_str()).collect();
    let outputs: HashSet<&str> = sig.outputs.iter().map(String::as_str).collect();
    let mut pairs = Vec::new();
    for o in &sig.outputs {
        if let Some(rest) = o.strip_prefix("present.") {
            let past = format!("past_key_values.{rest}");
            if inputs.contains(past.as_str()) {
                pairs.push((o.clone(), past));
            }
        }
    }
    for (out, inp) in &kv.state {
        if !outputs.contains(out.as_str()) {
            return Err(bad(inp, format!("--state {out}={inp}: the model has no output '{out}'")));
        }
        if !inputs.contains(inp.as_str()) {
            return Err(bad(inp, format!("--state {out}={inp}: the model has no input '{inp}'")));
        }
        if !pairs.iter().any(|(o, _)| o == out) {
            pairs.push((out.clone(), inp.clone()));
        }
    }
    if !pairs.is_empty() {
        return Ok((pairs, false));
    }
    let caches: Vec<&str> =
        sig.inputs.iter().map(|(n, _)| n.as_str()).filter(|n| !ROLES.contains(n) && !kv.fixed.contains(*n)).collect();
    if !caches.is_empty() && sig.outputs.len() == caches.len() + 1 {
        let pairs = sig.outputs[1..].iter().zip(caches).map(|(o, i)| (o.clone(), i.to_string())).collect();
        return Ok((pairs, true));
    }
    Err(bad(
        "past_key_values",
        "--kv-cache found no cache inputs: it pairs outputs present.N.key/value with inputs \
         past_key_values.N.key/value, or the outputs after the logits in order with the inputs other than \
         input_ids, attention_mask, position_ids and cache_position; name other pairs with --state OUTPUT=INPUT",
    ))
}

/// A cache that a float16 model keeps as float32 at its inputs and outputs (the fp16 converter's `keep_io_types`):
/// `present = Cast<f32>(Concat(Cast<f16>(past), new))`, attention reading the float16 concatenation. The cache
/// input becomes float16 (stored as 32-bit floats, as every activation is) and the Concat reads it directly, so
/// that the cache is written as `Concat(past, new)` (in place) and attention reads it with no cast in between;
/// `present` stays `Cast<f32>` of it. Exact for the caches generation holds, whose rows come from the model's
/// float16 values. Shape nodes of the cast read the past itself. Returns whether it did; anything else leaves the
/// graph as it is.
fn uncast_cache(g: &mut Graph, present: &str, past: &str, axis: usize, rank: usize) -> bool {
    let cast_to = |g: &Graph, n: NodeId, to: DType| matches!(g.node(n).op, Op::Cast { to: t, .. } if t == to);
    let (Some(p), Some(past_v)) = (named_output(g, present), input(g, past)) else { return false };
    let Some(out_cast) = g.value(p).producer.filter(|&n| cast_to(g, n, DType::F32)) else { return false };
    let Some(concat) = g.node(out_cast).inputs[0].and_then(|c| g.value(c).producer) else { return false };
    let c = g.node(concat);
    let Op::Concat { axis: a } = c.op else { return false };
    if c.inputs.len() != 2 || (a != axis as i64 && a + rank as i64 != axis as i64) {
        return false;
    }
    let Some(cast_past) = c.inputs[0] else { return false };
    let Some(in_cast) = g.value(cast_past).producer.filter(|&n| cast_to(g, n, DType::F16)) else { return false };
    if g.node(in_cast).inputs[0] != Some(past_v) {
        return false;
    }
    let readers = g.consumers(cast_past);
    if readers.iter().any(|&n| n != concat && !matches!(g.node(n).op, Op::Shape { .. })) {
        return false;
    }
    let Some(ty) = g.value(past_v).ty.clone() else { return false };
    g.value_mut(past_v).ty = Some(TensorType::new(DType::F16, ty.shape));
    g.replace_uses(cast_past, past_v);
    g.remove_node(in_cast);
    true
}

/// Adds graph `h` to `g`: its values and nodes named with `prefix`, but its inputs named in `shared` (which
/// become `g`'s inputs of the same names) and its constants equal to `g`'s of the same name (the weights, which
/// both steps import alike), which are `g`'s; its nodes `first` first. Returns `h`'s inputs as `g`'s values, in
/// order.
fn merge(
    g: &mut Graph,
    h: Graph,
    prefix: &str,
    shared: &HashSet<String>,
    first: &[NodeId],
) -> Result<Vec<ValueId>, PassError> {
    let names: HashMap<String, ValueId> = g.value_ids().map(|v| (g.value(v).name.clone(), v)).collect();
    let mut map: Vec<ValueId> = Vec::with_capacity(h.num_values());
    for v in h.value_ids() {
        let val = h.value(v);
        let same = names.get(&val.name).copied().filter(|&gv| {
            let gval = g.value(gv);
            if h.inputs.contains(&v) {
                shared.contains(&val.name) && g.inputs.contains(&gv)
            } else {
                matches!((&gval.data, &val.data), (Some(a), Some(b)) if a == b)
            }
        });
        map.push(match same {
            Some(gv) => gv,
            None => {
                if h.inputs.contains(&v) && shared.contains(&val.name) {
                    return Err(bad(&val.name, "a shared input one step lacks (a wgslc bug)"));
                }
                let nv = g.add_value(format!("{prefix}{}", val.name), val.ty.clone());
                g.value_mut(nv).data = val.data.clone();
                nv
            }
        });
    }
    // `first`, then the rest in `h`'s insertion order (which topological orders break ties by).
    let rest = h.node_ids().filter(|n| !first.contains(n));
    for n in first.iter().copied().chain(rest).collect::<Vec<_>>() {
        let node = h.node(n);
        let ins = node.inputs.iter().map(|i| i.map(|v| map[v.index()])).collect();
        let outs = node.outputs.iter().map(|v| map[v.index()]).collect();
        g.add_node(format!("{prefix}{}", node.name), node.op.clone(), ins, outs)?;
    }
    g.outputs.extend(h.outputs.iter().map(|v| map[v.index()]));
    Ok(h.inputs.iter().map(|v| map[v.index()]).collect())
}

#[cfg(test)]
mod tests;
