//! Decoder models with a KV cache (`--kv-cache`): one ONNX graph holding both steps that generation replays.
//!
//! A decoder exported with its cache as inputs and outputs (`past_key_values.N.key` → `present.N.key`, the names
//! HF/optimum and torch exports use) is compiled at fixed shapes: the cache inputs hold `rows = capacity - 1`
//! rows, a *decode* step takes one token and a *prefill* step `chunk` tokens. Each step sees the cache as a window:
//! rows `0..pos` hold the tokens so far, rows `pos..rows` are masked out through `attention_mask` (which is why
//! the loop must own that input), and the step's own tokens come after the window, at rows `rows..rows+tokens`,
//! where the model's causal mask (built from the shapes) places them. Attention over keys is invariant under
//! moving keys together with their mask, so every real token sees exactly the keys it would see in a cache of
//! `pos` rows; the model's positions come from `position_ids`, never from the window's shape. After a step the
//! runtime copies its new rows into the cache at `pos`.
//!
//! When every cache is written as `Concat(past, new)` and nothing else reads its data (Shape nodes may size masks
//! from it), the decode step writes in place instead: the cache inputs hold `capacity` rows, the decode step's
//! Concats become `CacheWrite`s (wgslc's own op) that write the token's rows at row `wgslc.cache_row` (the
//! token's position) and attend over the whole cache, the loop unmasking rows `0..=pos`; every other reader,
//! the prefill step included, reads the window of the first `rows` rows (a Slice, a view). No kernel copies a
//! cache and the runtime copies no decode rows.
//!
//! With [`CacheLayout::Positions`] (chosen by the driver when the model's mask does not move with the window's
//! keys: one that compares a key's index with `position_ids`) the prefill step writes in place too, at its
//! chunk's first position, and attends over the whole cache, so every key sits at its position; the capacity is
//! rounded up to a multiple of the chunk.
//!
//! [`decoder_model`] rewrites the model into one graph with both steps (the prefill step's values prefixed
//! `prefill/`, the cache inputs and the weights shared), each step ending in an `ArgMax` over its last real
//! token's logits (`next_token`) and in a `Sample` over them (`wgslc.sampled_token`, wgslc's own op: top-k and
//! temperature from the shared inputs `wgslc.temperature` and `wgslc.sampling`), and each `present` output reduced to the step's new rows where the model writes
//! it as `Concat(past, new)` (the runtime copies those rows; the full concatenation stays internal).

use crate::proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, TensorShapeProto, TypeProto, TypeProtoTensor,
    ValueInfoProto,
};
use crate::ImportError;
use std::collections::{HashMap, HashSet};

/// The prefix of the prefill step's names.
pub const PREFILL: &str = "prefill/";
/// The sampling inputs both steps share (see [`DecoderLayout`]).
const TEMPERATURE: &str = "wgslc.temperature";
const SAMPLING: &str = "wgslc.sampling";
/// The decode step's cache row input, when it writes the cache in place (see [`StepLayout::cache_row`]).
const CACHE_ROW: &str = "wgslc.cache_row";

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

fn bad(name: &str, reason: impl Into<String>) -> ImportError {
    ImportError::Input { name: name.to_string(), reason: reason.into() }
}

fn dims(v: &ValueInfoProto) -> Vec<Dimension> {
    v.r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .and_then(|t| t.shape.as_ref())
        .map(|s| s.dim.clone())
        .unwrap_or_default()
}

fn is_symbolic(d: &Dimension) -> bool {
    d.dim_value.is_none_or(|v| v < 0)
}

/// The state pairs `(output, input)`: `present.N.key|value` ↔ `past_key_values.N.key|value` and the extra ones.
fn state_pairs(g: &GraphProto, extra: &[(String, String)]) -> Result<Vec<(String, String)>, ImportError> {
    let inputs: HashSet<&str> = g.input.iter().map(|i| i.name.as_str()).collect();
    let outputs: HashSet<&str> = g.output.iter().map(|o| o.name.as_str()).collect();
    let mut pairs = Vec::new();
    for o in &g.output {
        if let Some(rest) = o.name.strip_prefix("present.") {
            let past = format!("past_key_values.{rest}");
            if inputs.contains(past.as_str()) {
                pairs.push((o.name.clone(), past));
            }
        }
    }
    for (out, inp) in extra {
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
    if pairs.is_empty() {
        return Err(bad(
            "past_key_values",
            "--kv-cache found no cache inputs: it pairs outputs present.N.key/value with inputs \
             past_key_values.N.key/value; name other pairs with --state OUTPUT=INPUT",
        ));
    }
    Ok(pairs)
}

/// A decoder rewritten for `--kv-cache`.
pub struct DecoderModel {
    /// The two-step graph.
    pub model: ModelProto,
    /// The shape of every run-time input.
    pub shapes: HashMap<String, Vec<usize>>,
    pub layout: DecoderLayout,
}

/// Rewrites a decoder into the two-step graph described in the module doc, with the input shapes to compile it
/// at and where the loop's tensors are.
pub fn decoder_model(mut model: ModelProto, kv: &KvCache, cache: CacheLayout) -> Result<DecoderModel, ImportError> {
    let mut g = model.graph.take().ok_or(ImportError::NoGraph)?;
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
    let rows = capacity - 1;
    if g.node.iter().any(|n| n.attribute.iter().any(|a| a.g.is_some() || !a.graphs.is_empty())) {
        return Err(bad("past_key_values", "--kv-cache does not support models with subgraphs (If, Loop, Scan)"));
    }
    let mut inits: HashSet<String> = g.initializer.iter().map(|t| t.name.clone()).collect();
    let pairs = state_pairs(&g, &kv.state)?;
    let runtime_inputs: Vec<ValueInfoProto> = g.input.iter().filter(|i| !inits.contains(&i.name)).cloned().collect();
    let find = |name: &str| runtime_inputs.iter().find(|i| i.name == name);

    // The cache inputs: [batch, …, rows along the one symbolic axis after the batch, …].
    let mut state = Vec::new();
    let mut past_shapes = HashMap::new();
    for (_, past) in &pairs {
        let d = dims(find(past).ok_or_else(|| bad(past, "a cache input must be a run-time input"))?);
        let sym: Vec<usize> = (1..d.len()).filter(|&i| is_symbolic(&d[i])).collect();
        let [axis] = sym[..] else {
            return Err(bad(
                past,
                format!(
                    "a cache input needs exactly one symbolic dim after the batch dim (its length), it has {}",
                    sym.len()
                ),
            ));
        };
        if d.first().is_some_and(|b| b.dim_value.is_some_and(|v| v != 1)) {
            return Err(bad(past, "--kv-cache generates with batch 1; the cache's batch dim is fixed at another size"));
        }
        let shape: Vec<usize> = d
            .iter()
            .enumerate()
            .map(|(i, x)| if i == axis { rows } else { x.dim_value.map_or(1, |v| v as usize) })
            .collect();
        past_shapes.insert(past.clone(), shape);
        state.push((past.clone(), axis));
    }
    for r in &["input_ids", "attention_mask"] {
        if find(r).is_none() {
            let why = if *r == "attention_mask" {
                "the cache has a fixed capacity and its unused rows are masked out through it"
            } else {
                "the loop feeds the tokens through it"
            };
            return Err(bad(r, format!("--kv-cache needs a model input named '{r}': {why}")));
        }
    }
    if find("position_ids").is_none() {
        return Err(bad(
            "position_ids",
            "--kv-cache needs a model input named 'position_ids': positions derived from the cache's length would \
             be the fixed capacity's, not the token's",
        ));
    }
    let states: HashSet<&str> = pairs.iter().map(|(_, p)| p.as_str()).collect();
    let loop_input = |n: &str| states.contains(n) || ROLES.contains(&n) || kv.fixed.contains(n);
    if let Some(other) = runtime_inputs.iter().find(|i| !loop_input(&i.name)) {
        return Err(bad(
            &other.name,
            format!(
                "--kv-cache fills the inputs {} and the cache; the model also takes '{}' (bind it with --const)",
                ROLES.join(", "),
                other.name
            ),
        ));
    }
    let logits = g
        .output
        .iter()
        .find(|o| o.name == "logits")
        .or_else(|| g.output.iter().find(|o| !pairs.iter().any(|(p, _)| *p == o.name)))
        .map(|o| o.name.clone())
        .ok_or_else(|| bad("logits", "--kv-cache needs a logits output"))?;

    // Float16 caches kept float32 at the boundary become float16 inputs (their present outputs have no declared
    // type then: a step's new rows are float16).
    let mut uncast: HashSet<String> = HashSet::new();
    for ((present, past), (_, axis)) in pairs.iter().zip(&state) {
        if uncast_cache(&mut g, present, past, *axis, past_shapes[past].len()) {
            uncast.insert(present.clone());
        }
    }

    // present = Concat(past, new) along the cache axis: the step's output becomes `new` alone.
    let mut producer: HashMap<String, usize> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for o in &n.output {
            producer.insert(o.clone(), i);
        }
    }
    let mut present_rows = Vec::new();
    let mut renames: HashMap<String, String> = HashMap::new();
    let mut extra_nodes = Vec::new();
    let mut concats = Vec::new();
    for ((present, past), (_, axis)) in pairs.iter().zip(&state) {
        let rank = past_shapes[past].len() as i64;
        // The Concat writing `present`, or (an uncast float16 cache) the Concat under its Cast.
        let at =
            producer.get(present).map(|&i| if uncast.contains(present) { producer[&g.node[i].input[0]] } else { i });
        let direct = at.map(|i| &g.node[i]).filter(|n| {
            let a = n.attribute.iter().find(|a| a.name == "axis").map(|a| a.i).unwrap_or(0);
            n.op_type == "Concat"
                && n.domain.is_empty()
                && n.input.len() == 2
                && n.input[0] == *past
                && (a == *axis as i64 || a + rank == *axis as i64)
        });
        match direct {
            Some(n) => {
                concats.push(at.expect("matched"));
                let new = n.input[1].clone();
                let whole = format!("{present}/with_past");
                renames.insert(present.clone(), whole);
                extra_nodes.push(node("Identity", &format!("{present}/new_rows"), &[&new], present, vec![]));
                present_rows.push(0);
            }
            None => present_rows.push(rows),
        }
    }
    for n in &mut g.node {
        for s in n.input.iter_mut().chain(n.output.iter_mut()) {
            if let Some(r) = renames.get(s) {
                *s = r.clone();
            }
        }
    }
    g.node.extend(extra_nodes);

    // In place: when every cache is written as Concat(past, new) and its data read by nothing else, the cache
    // inputs hold `capacity` rows and the decode step writes its token's rows at the token's position
    // (`CACHE_ROW`), so no step copies the cache and the runtime copies no rows; the decode step attends over the
    // whole cache with the rows past its token masked out. Everything else in either step (the prefill step's
    // Concats, and Shape nodes that size masks from the cache) reads the cache's first `rows` rows, the window.
    let shape_only = |n: &NodeProto| n.op_type == "Shape" && n.domain.is_empty();
    let in_place = concats.len() == pairs.len()
        && pairs.iter().all(|(_, past)| {
            g.node.iter().enumerate().all(|(i, n)| !n.input.contains(past) || concats.contains(&i) || shape_only(n))
        });
    let positions = cache == CacheLayout::Positions;
    if positions && !in_place {
        return Err(bad(
            &pairs[0].1,
            "the model's attention mask needs every key at its position in the cache, which wgslc gives only to \
             caches written as Concat(past, new) and read by nothing else",
        ));
    }
    if in_place {
        let mut windows = Vec::new();
        for ((_, past), (_, axis)) in pairs.iter().zip(&state) {
            past_shapes.get_mut(past).expect("a cache shape")[*axis] = rows + 1;
            let window = format!("{past}/window");
            let bounds = [("starts", 0), ("ends", rows as i64), ("axes", *axis as i64)];
            let names: Vec<String> = bounds.iter().map(|(b, _)| format!("{window}/{b}")).collect();
            for (name, (_, v)) in names.iter().zip(bounds) {
                g.initializer.push(int64_tensor(name, v));
                inits.insert(name.clone());
            }
            let mut slice = node("Slice", &window, &[past, &names[0], &names[1], &names[2]], &window, vec![]);
            // Opsets before 10 take the bounds as attributes.
            slice.attribute = bounds.iter().map(|&(b, v)| ints_attr(b, v)).collect();
            windows.push(slice);
        }
        for (i, n) in g.node.iter_mut().enumerate() {
            if concats.contains(&i) {
                continue;
            }
            for s in n.input.iter_mut() {
                if pairs.iter().any(|(_, past)| past == s) {
                    *s = format!("{s}/window");
                }
            }
        }
        concats.iter_mut().for_each(|c| *c += windows.len());
        g.node.splice(0..0, windows);
    }

    // Both steps: the decode step keeps the names, the prefill step's are prefixed.
    let shared: HashSet<String> = inits
        .iter()
        .chain(&kv.fixed)
        .cloned()
        .chain(states.iter().map(|s| s.to_string()))
        .chain([TEMPERATURE.to_string(), SAMPLING.to_string()])
        .collect();
    let mut prefill_nodes: Vec<NodeProto> = g.node.iter().map(|n| prefixed(n, &shared)).collect();
    if in_place {
        // The prefill step's Concats read its window (Window) or write in place too (Positions); the decode
        // step's become in-place writes.
        let in_place_write = |n: &mut NodeProto, row: String, axis: usize| {
            n.op_type = "CacheWrite".into();
            n.domain = crate::WGSLC_DOMAIN.into();
            n.input.push(row);
            // The Concat's axis, which matched the cache's (as given or counted from the end).
            n.attribute = vec![int_attr("axis", axis as i64)];
        };
        for ((&c, (_, past)), (_, axis)) in concats.iter().zip(&pairs).zip(&state) {
            if positions {
                in_place_write(&mut prefill_nodes[c], format!("{PREFILL}{CACHE_ROW}"), *axis);
            } else {
                prefill_nodes[c].input[0] = format!("{PREFILL}{past}/window");
            }
            in_place_write(&mut g.node[c], CACHE_ROW.into(), *axis);
        }
        if positions {
            // The prefill step's window (what its Shape nodes size masks from) ends `chunk` rows before the cache,
            // so that its concatenation is the whole cache.
            for (_, past) in &pairs {
                let window = format!("{PREFILL}{past}/window");
                let ends = format!("{window}/ends");
                g.initializer.push(int64_tensor(&ends, (capacity - chunk) as i64));
                inits.insert(ends.clone());
                for n in prefill_nodes.iter_mut().filter(|n| n.op_type == "Slice" && n.output[0] == window) {
                    n.input[2] = ends.clone();
                    for a in n.attribute.iter_mut().filter(|a| a.name == "ends") {
                        a.ints = vec![(capacity - chunk) as i64];
                    }
                }
            }
        }
    }
    let mut shapes = past_shapes.clone();
    let mut steps = Vec::new();
    let mut inputs: Vec<ValueInfoProto> = Vec::new();
    let mut outputs: Vec<ValueInfoProto> = Vec::new();
    for (name, tokens, prefix) in [("decode", 1, ""), ("prefill", chunk, PREFILL)] {
        let p = |s: &str| format!("{prefix}{s}");
        for r in ROLES {
            if let Some(i) = find(r) {
                let rank = dims(i).len();
                // A step that writes in place attends over the whole cache.
                let in_place_step = in_place && (prefix.is_empty() || positions);
                let len = match (r, in_place_step) {
                    ("attention_mask", true) => capacity,
                    ("attention_mask", false) => rows + tokens,
                    _ => tokens,
                };
                let shape = match (r, rank) {
                    ("cache_position", 1) | (_, 1) => vec![len],
                    (_, 2) => vec![1, len],
                    _ => return Err(bad(r, format!("expected a rank-1 or rank-2 input, it has rank {rank}"))),
                };
                shapes.insert(p(r), shape);
                inputs.push(ValueInfoProto { name: p(r), r#type: i.r#type.clone() });
            }
        }
        let last_index = (prefix == PREFILL).then(|| p("wgslc.last_index"));
        if let Some(li) = &last_index {
            shapes.insert(li.clone(), vec![1]);
            inputs.push(int64_input(li, 1));
        }
        // next_token = ArgMax(logits[:, last real token, :]) over the vocabulary.
        let lg = p(&logits);
        let row = match &last_index {
            Some(li) => {
                let row = p("wgslc.last_logits");
                let n = node("Gather", &row, &[&lg, li], &row, vec![int_attr("axis", 1)]);
                if prefix.is_empty() {
                    g.node.push(n);
                } else {
                    prefill_nodes.push(n);
                }
                row
            }
            None => lg.clone(),
        };
        let next = p("next_token");
        let argmax = node("ArgMax", &next, &[&row], &next, vec![int_attr("axis", -1), int_attr("keepdims", 0)]);
        // Or a draw from them, keyed by the position of the step's last real token (prefill pads with it).
        let sampled = p("wgslc.sampled_token");
        let mut sample = node("Sample", &sampled, &[&row, TEMPERATURE, SAMPLING, &p("position_ids")], &sampled, vec![]);
        sample.domain = crate::WGSLC_DOMAIN.into();
        if prefix.is_empty() {
            g.node.extend([argmax, sample]);
        } else {
            prefill_nodes.extend([argmax, sample]);
        }
        // A step that writes the cache in place has no present outputs (nothing reads them).
        let writes_in_place = in_place && (prefix.is_empty() || positions);
        let cache_row = writes_in_place.then(|| p(CACHE_ROW));
        if let Some(r) = &cache_row {
            shapes.insert(r.clone(), vec![1]);
            inputs.push(int64_input(r, 1));
        }
        for o in &g.output {
            if writes_in_place && pairs.iter().any(|(present, _)| *present == o.name) {
                continue;
            }
            let r#type = if uncast.contains(&o.name) { None } else { o.r#type.clone() };
            outputs.push(ValueInfoProto { name: p(&o.name), r#type });
        }
        outputs.push(ValueInfoProto { name: next.clone(), r#type: None });
        outputs.push(ValueInfoProto { name: sampled.clone(), r#type: None });
        steps.push(StepLayout {
            name,
            tokens,
            input_ids: p("input_ids"),
            attention_mask: p("attention_mask"),
            position_ids: find("position_ids").map(|_| p("position_ids")),
            cache_position: find("cache_position").map(|_| p("cache_position")),
            last_index,
            logits: lg,
            next_token: next,
            sampled_token: sampled,
            present: if writes_in_place {
                vec![]
            } else {
                pairs.iter().zip(&present_rows).map(|((o, _), &r)| (p(o), r)).collect()
            },
            cache_row,
        });
    }
    for (past, _) in &state {
        // As the graph now types it (an uncast float16 cache).
        let i = g.input.iter().find(|i| i.name == *past).expect("checked");
        inputs.push(i.clone());
    }
    inputs.push(tensor_input(TEMPERATURE, 1, 1));
    inputs.push(tensor_input(SAMPLING, 7, 2));
    shapes.insert(TEMPERATURE.into(), vec![1]);
    shapes.insert(SAMPLING.into(), vec![2]);
    // Initializers that the model also lists as inputs stay inputs (they are weights), as do --const inputs.
    inputs.extend(g.input.iter().filter(|i| inits.contains(&i.name) || kv.fixed.contains(&i.name)).cloned());
    g.node.extend(prefill_nodes);
    g.input = inputs;
    g.output = outputs;
    g.value_info.clear();
    model.graph = Some(g);
    let layout =
        DecoderLayout { cache, state, temperature: TEMPERATURE.into(), sampling: SAMPLING.into(), steps, rows };
    Ok(DecoderModel { model, shapes, layout })
}

/// A cache that a float16 model keeps as float32 at its inputs and outputs (the fp16 converter's `keep_io_types`):
/// `present = Cast<f32>(Concat(Cast<f16>(past), new))`, attention reading the float16 concatenation. The cache
/// input becomes float16 (stored as 32-bit floats, as every activation is) and the Concat reads it directly, so
/// that the cache is written as `Concat(past, new)` (in place) and attention reads it with no cast in between;
/// `present` stays `Cast<f32>` of it. Exact for the caches generation holds, whose rows come from the model's
/// float16 values. Shape nodes of the cast read the past itself. Returns whether it did; anything else leaves the
/// graph as it is.
fn uncast_cache(g: &mut GraphProto, present: &str, past: &str, axis: usize, rank: usize) -> bool {
    let cast_to = |n: &NodeProto, to: i64| {
        n.op_type == "Cast" && n.domain.is_empty() && n.attribute.iter().any(|a| a.name == "to" && a.i == to)
    };
    let (f32_, f16) = (1, 10);
    let producer = |g: &GraphProto, v: &str| g.node.iter().position(|n| n.output.iter().any(|o| o == v));
    let Some(out_cast) = producer(g, present).filter(|&i| cast_to(&g.node[i], f32_)) else { return false };
    let Some(concat) = producer(g, &g.node[out_cast].input[0]) else { return false };
    let c = &g.node[concat];
    let a = c.attribute.iter().find(|a| a.name == "axis").map(|a| a.i).unwrap_or(0);
    if c.op_type != "Concat" || c.input.len() != 2 || (a != axis as i64 && a + rank as i64 != axis as i64) {
        return false;
    }
    let cast_past = c.input[0].clone();
    let Some(in_cast) = producer(g, &cast_past).filter(|&i| cast_to(&g.node[i], f16) && g.node[i].input[0] == past)
    else {
        return false;
    };
    let readers: Vec<usize> = (0..g.node.len()).filter(|&i| g.node[i].input.contains(&cast_past)).collect();
    let shape_only = |n: &NodeProto| n.op_type == "Shape" && n.domain.is_empty();
    if readers.iter().any(|&i| i != concat && !shape_only(&g.node[i])) {
        return false;
    }
    let Some(tt) = g.input.iter_mut().find(|i| i.name == past).and_then(|i| i.r#type.as_mut()?.tensor_type.as_mut())
    else {
        return false;
    };
    tt.elem_type = f16 as i32;
    for &i in &readers {
        for s in g.node[i].input.iter_mut().filter(|s| **s == cast_past) {
            *s = past.to_string();
        }
    }
    g.node.remove(in_cast);
    true
}

fn prefixed(n: &NodeProto, shared: &HashSet<String>) -> NodeProto {
    let name = |s: &String| if s.is_empty() || shared.contains(s) { s.clone() } else { format!("{PREFILL}{s}") };
    NodeProto {
        input: n.input.iter().map(name).collect(),
        output: n.output.iter().map(name).collect(),
        name: format!("{PREFILL}{}", n.name),
        ..n.clone()
    }
}

fn node(op: &str, name: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        name: name.to_string(),
        op_type: op.to_string(),
        domain: String::new(),
        attribute,
    }
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: 2, i, ..Default::default() }
}

fn ints_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: 7, ints: vec![i], ..Default::default() }
}

/// A one-element int64 initializer.
fn int64_tensor(name: &str, v: i64) -> crate::proto::TensorProto {
    crate::proto::TensorProto {
        name: name.into(),
        dims: vec![1],
        data_type: 7,
        int64_data: vec![v],
        ..Default::default()
    }
}

fn int64_input(name: &str, len: i64) -> ValueInfoProto {
    tensor_input(name, 7, len)
}

/// A rank-1 input of ONNX element type `elem_type` (1 float, 7 int64).
fn tensor_input(name: &str, elem_type: i32, len: i64) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: Some(TensorShapeProto { dim: vec![Dimension { dim_value: Some(len), dim_param: None }] }),
            }),
            ..Default::default()
        }),
    }
}

/// The model as the cache-layout proof imports it at its probe shapes: every initializer of `min_elements` or more
/// that only float products and lookups read (the weights of MatMul, Gemm, Conv and Gather, which no mask is
/// computed from; a mask table a Slice reads stays, and so do quantized weights, which their ops take as
/// initializers only) becomes a run-time input of its shape, so the probe imports neither read nor store it.
/// Returns their names: the proof takes them as unknown in the compiled graph too.
pub fn without_large_weights(model: &mut ModelProto, min_elements: u64) -> HashSet<String> {
    const WEIGHT_READERS: [&str; 6] = ["MatMul", "Gemm", "Conv", "Gather", "GatherND", "Transpose"];
    let mut names = HashSet::new();
    let Some(g) = model.graph.as_mut() else { return names };
    let mut readers: HashMap<&str, Vec<&str>> = HashMap::new();
    for n in &g.node {
        for i in &n.input {
            readers.entry(i.as_str()).or_default().push(n.op_type.as_str());
        }
    }
    for t in &g.initializer {
        let n: u64 = t.dims.iter().map(|&d| d.max(0) as u64).product();
        let weight = readers.get(t.name.as_str()).is_some_and(|r| r.iter().all(|op| WEIGHT_READERS.contains(op)));
        if n >= min_elements && weight {
            names.insert(t.name.clone());
        }
    }
    let mut kept = Vec::new();
    for t in std::mem::take(&mut g.initializer) {
        if !names.contains(&t.name) {
            kept.push(t);
            continue;
        }
        let dim = t.dims.iter().map(|&d| Dimension { dim_value: Some(d), dim_param: None }).collect();
        if !g.input.iter().any(|i| i.name == t.name) {
            g.input.push(ValueInfoProto {
                name: t.name.clone(),
                r#type: Some(TypeProto {
                    tensor_type: Some(TypeProtoTensor {
                        elem_type: t.data_type,
                        shape: Some(TensorShapeProto { dim }),
                    }),
                    ..Default::default()
                }),
            });
        }
    }
    g.initializer = kept;
    names
}
