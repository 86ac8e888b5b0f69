//! The wgslc artifact schema: `plan.json` and the layout of an artifact directory. This crate is the only
//! boundary between the compiler and the runtime; the compiler writes these types and the runtime reads them.
//!
//! An artifact directory holds:
//! - `plan.json` — a [`Plan`];
//! - `kernels/*.wgsl` — one WGSL module per kernel, each validated by naga at compile time;
//! - `weights.safetensors` — every constant the kernels read, already in storage type (f32, i32 or u32), named as
//!   in [`Plan::weights`], which says which weight buffer and offset it is copied to at load.
//!
//! The format is versioned by [`Plan::version`]; a runtime refuses versions it does not know.

use serde::{Deserialize, Serialize};
use std::path::Path;

mod device;
mod host;
mod program;
pub use device::{
    for_naga, subgroups_usable, submit_ranges, DeviceLimits, ENABLE_SUBGROUPS, SUBGROUP_SIZES, SUBMIT_FIRST, SUBMIT_MAX,
};
pub use host::{relayout, HostTensor, RunLayout, TensorData};
pub use program::{Affine, Buf, Constant, Copy, Instr, Iota, Mask, Place, Program, Values, Vars, Write};

/// The format identifier in every plan.json.
pub const FORMAT: &str = "wgslc-plan";
/// The schema version this crate reads and writes.
pub const VERSION: u32 = 2;

/// The whole replay plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Always [`FORMAT`].
    pub format: String,
    /// Schema version, [`VERSION`] for this crate.
    pub version: u32,
    /// Graph inputs in model order (weights excluded).
    pub inputs: Vec<TensorSpec>,
    /// Graph outputs in model order.
    pub outputs: Vec<TensorSpec>,
    /// Every GPU buffer the plan needs, created once at load.
    pub buffers: Vec<Buffer>,
    /// Where each tensor of weights.safetensors goes: weight buffers hold several, at aligned offsets.
    pub weights: Vec<WeightSpec>,
    /// Every kernel: a WGSL module with its bindings and workgroup counts.
    pub kernels: Vec<Kernel>,
    /// The replay order: indices into `kernels`.
    pub dispatches: Vec<usize>,
    /// Decoder artifacts (`wgslc compile --kv-cache`) only: the steps that generation replays and the cache they
    /// share. A plain run replays every dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder: Option<Decoder>,
    /// Artifacts compiled with ranged dims (`--dim NAME=MIN..MAX`) only: the dims, and the buffer the runtime writes
    /// their values into before each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Ranges>,
}

/// Ranged dims. Every buffer is sized for each dim's `max`; a run with value `n` holds, along each ranged axis of
/// a tensor ([`TensorSpec::ranged`]), `factor · n` valid entries laid out as at `max` (the rest is padding the
/// kernels never read as data). Before a run the runtime finds each dim's `n` from the inputs' shapes (each in
/// `min..=max`, agreeing across inputs), writes each input at the `max` layout, writes the values as i32, one per
/// dim in order, at the start of `buffer`, and reads each output's valid entries back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Ranges {
    pub dims: Vec<DimRange>,
    pub buffer: usize,
    /// Artifacts compiled in buckets (`--buckets`, one ranged dim) only: the dim's range cut into consecutive
    /// parts, each with kernels of its own compiled for its values, sharing the plan's buffers and weights. A run
    /// replays the bucket that holds its value `n`: its tensors are laid out as at the bucket's `max` (not the
    /// dim's), its scaled kernels dispatch `ceil(W · n / bucket max)` workgroups, and `Plan::dispatches` is the last
    /// bucket's (what a replay at the dim's max runs). Without buckets every run replays `Plan::dispatches`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<Bucket>,
}

/// One part of a bucketed dim's range (see [`Ranges::buckets`]): the values `min..=max` and the dispatches that
/// run them, indices into `Plan::kernels` (kernels of no other bucket). A bucket of one value was compiled at that
/// value (no masks, nothing scaled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    pub min: usize,
    pub max: usize,
    pub dispatches: Vec<usize>,
}

/// A dim that takes any value in `min..=max` at run time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DimRange {
    pub name: String,
    pub min: usize,
    pub max: usize,
}

/// An axis of a tensor whose extent is `factor · n` for the run's value `n` of `Ranges::dims[dim]` (its shape
/// holds `factor · max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RangedAxis {
    pub axis: usize,
    pub dim: usize,
    pub factor: usize,
}

/// How a decoder artifact generates. The cache inputs (`state`) belong to the session: they are zeroed at the
/// start of a generation and never copied through the host. A step without `cache_row` reads the cache's first
/// `rows` rows as a window whose rows `pos..rows` the loop masks out through `attention_mask` (the model sees its
/// own new tokens at rows `rows..rows+tokens`, positions come from `position_ids`); after it the runtime copies
/// the step's new rows of each `present` output into the cache at `pos`. A step with `cache_row` writes its
/// tokens' rows into the cache itself, at the row the runtime puts in that input (its first token's position
/// `pos`), and attends over the whole cache, every key at its position: its `attention_mask` covers the
/// `capacity` rows, 1 for the rows of the tokens so far and the step's real ones, and a prefill step that writes
/// in place gets its tokens' positions as `cache_position` (the decode step gets `rows`). The cache inputs hold
/// `capacity` rows when a step writes in place, `rows` otherwise; a prefill chunk that starts below `rows` ends
/// within the capacity. Prompt plus generated tokens may not exceed `capacity` (`rows + 1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Decoder {
    pub capacity: usize,
    pub rows: usize,
    /// The cache: graph inputs shared by every step.
    pub state: Vec<StateSpec>,
    /// `decode` (one token) and `prefill` (`tokens` per step, the last chunk padded at its end).
    pub steps: Vec<Step>,
    /// Index into `Plan::inputs`: the token history (integers, `capacity` elements), which no dispatch of a step
    /// reads. Generation writes the prompt into it; each step's chosen token goes after it, on the GPU (absent from
    /// artifacts made before the decode loop advanced on the GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// What generation writes, replays and copies, phase by phase (absent from artifacts made before the loop was
    /// described as data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Program>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StateSpec {
    /// Index into `Plan::inputs`.
    pub input: usize,
    /// The axis the cache's rows run along.
    pub axis: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    /// Tokens per step.
    pub tokens: usize,
    /// This step's dispatches, in replay order (a subsequence of `Plan::dispatches`).
    pub dispatches: Vec<usize>,
    /// Indices into `Plan::inputs` that the loop fills.
    pub input_ids: usize,
    pub attention_mask: usize,
    pub position_ids: Option<usize>,
    pub cache_position: Option<usize>,
    /// Prefill only: the index of the last real token in the step (the chunk is padded at its end).
    pub last_index: Option<usize>,
    /// Indices into `Plan::outputs`.
    pub logits: usize,
    /// The greedy next token (int64 `[1, 1]`), chosen on the GPU.
    pub next_token: usize,
    /// One per `Decoder::state` entry: the output holding the step's new rows; empty when the step writes the
    /// cache in place (`cache_row`).
    pub present: Vec<Present>,
    /// A step that writes its token's cache rows in place: the index into `Plan::inputs` (integers, one element)
    /// of the row it writes them at (absent from artifacts made before in-place cache writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_row: Option<usize>,
    /// The step when it draws its token instead (absent from artifacts made before sampling existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<StepSample>,
    /// A decode step that writes in place: the kernels that prepare the next step on the GPU (see [`Advance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advance: Option<Advance>,
}

/// What runs after each decode step of a step that writes in place, in the same compute pass: one kernel, not in
/// `Plan::dispatches`, that reads the step's chosen token (`greedy`: `next_token`; `sample`: the sampling token)
/// and writes it into `input_ids` and into the token history at the next position `p` (one past `cache_row`'s
/// value), then sets `cache_row` and `position_ids` to `p` and the attention mask's word `p` to 1. So a submit's
/// decode steps follow each other in one compute pass, with no copies between them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Advance {
    /// Indices into `Plan::kernels`.
    pub greedy: usize,
    pub sample: usize,
}

/// A step that samples: the same logits and cache rows, its token drawn by a `Sample` kernel (top-k, then a
/// Gumbel-max draw at the temperature, keyed by the seed and the step's last position) instead of the ArgMax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StepSample {
    /// The drawn token (int64 `[1, 1]`): index into `Plan::outputs`.
    pub token: usize,
    /// The step's dispatches when it samples, in replay order (a subsequence of `Plan::dispatches`).
    pub dispatches: Vec<usize>,
    /// Indices into `Plan::inputs`: the temperature (float, one element; 0 or less is greedy) and the top-k and
    /// seed (integers, two elements; top-k 0 keeps the whole vocabulary, the seed's 32 bits are used as is).
    pub temperature: usize,
    pub params: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Present {
    /// Index into `Plan::outputs`.
    pub output: usize,
    /// The row of that output where the step's first token is (0 when the output is the new rows alone).
    pub first_row: usize,
}

/// A graph input or output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub name: String,
    /// Logical dtype as the model declares it.
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// How it is stored on the GPU.
    pub storage: StorageType,
    /// The buffer holding it (the whole buffer, from offset 0).
    pub buffer: usize,
    /// The axes that follow a ranged dim (see [`Ranges`]); `shape` holds their largest extent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranged: Vec<RangedAxis>,
}

/// A constant: a tensor of weights.safetensors copied into a weight buffer at load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WeightSpec {
    /// The tensor's name in weights.safetensors.
    pub name: String,
    pub shape: Vec<usize>,
    pub storage: StorageType,
    pub buffer: usize,
    /// Byte offset in the buffer, a multiple of 256.
    pub offset: u64,
}

/// A tensor's logical dtype, as the model declares it (ONNX's names, lowercase). Values are stored on the GPU as
/// their [`StorageType`] (float32 for every float, int32 for int64, …); the runtimes convert at the boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float32,
    Float16,
    Bfloat16,
    Float64,
    Float8e4m3fn,
    Float8e4m3fnuz,
    Float8e5m2,
    Float8e5m2fnuz,
    Float4e2m1,
    Int64,
    Int32,
    Int16,
    Int8,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int4,
    Uint4,
    Int2,
    Uint2,
    Bool,
}

impl Dtype {
    /// The name plan.json spells it with.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float64 => "float64",
            Dtype::Float8e4m3fn => "float8e4m3fn",
            Dtype::Float8e4m3fnuz => "float8e4m3fnuz",
            Dtype::Float8e5m2 => "float8e5m2",
            Dtype::Float8e5m2fnuz => "float8e5m2fnuz",
            Dtype::Float4e2m1 => "float4e2m1",
            Dtype::Int64 => "int64",
            Dtype::Int32 => "int32",
            Dtype::Int16 => "int16",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Uint16 => "uint16",
            Dtype::Uint32 => "uint32",
            Dtype::Uint64 => "uint64",
            Dtype::Int4 => "int4",
            Dtype::Uint4 => "uint4",
            Dtype::Int2 => "int2",
            Dtype::Uint2 => "uint2",
            Dtype::Bool => "bool",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// GPU element types; every one is 4 bytes wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    F32,
    I32,
    U32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum BufferKind {
    Input,
    Output,
    Weight,
    Intermediate,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Buffer {
    /// Informative (inputs and outputs are named as the tensor they hold).
    pub name: String,
    /// Size in bytes, a multiple of 4.
    pub size: u64,
    pub kind: BufferKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    pub name: String,
    /// Path of the WGSL module relative to the artifact directory (under `kernels/`).
    pub wgsl: String,
    /// A second module computing the same with WebGPU's subgroup operations (`enable subgroups;`, the
    /// `subgroup_id`, `subgroup_invocation_id` and `subgroup_size` builtins), for kernels that gain from them. A
    /// runtime replays it instead of `wgsl` where [`subgroups_usable`] holds for its device ([`Kernel::module`]); the two have the same
    /// entry point and bindings and may differ in the last bits of their sums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subgroups: Option<String>,
    pub entry_point: String,
    /// Bindings of group 0, in binding-number order.
    pub bindings: Vec<Binding>,
    /// Workgroup counts (x, y, z) of its dispatch.
    pub workgroups: [u32; 3],
    /// Artifacts with ranged dims only: the one workgroup axis whose count follows a dim. A run with value `n`
    /// dispatches `max(1, ceil(workgroups[axis] · n / max))` along it (the workgroups past that compute only
    /// padding); other kernels always dispatch `workgroups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<GridScale>,
}

/// See [`Kernel::scale`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct GridScale {
    /// 0, 1 or 2: x, y or z.
    pub axis: usize,
    /// An index into `Ranges::dims`.
    pub dim: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    ReadWrite,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub binding: u32,
    pub buffer: usize,
    /// Byte offset into the buffer, a multiple of 256.
    pub offset: u64,
    /// Bytes bound.
    pub size: u64,
    pub access: Access,
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("cannot read '{path}': {source}")]
    Io { path: String, source: std::io::Error },
    #[error("plan.json is not a valid plan: {0}")]
    Parse(String),
    #[error("plan.json: {0}")]
    Invalid(String),
    /// A run's input that the plan's spec of it refuses (shape, dtype, range).
    #[error("input '{name}': {reason}")]
    Input { name: String, reason: String },
}

impl Plan {
    /// Reads and checks `DIR/plan.json` (structure only; the runtime checks device limits).
    pub fn read(dir: &Path) -> Result<Plan, ArtifactError> {
        let path = dir.join("plan.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|source| ArtifactError::Io { path: path.display().to_string(), source })?;
        Plan::parse(&text)
    }

    /// Parses and checks plan.json's text. The format and version are read first, so an artifact of another
    /// schema version is refused as such rather than for the fields it lacks.
    pub fn parse(text: &str) -> Result<Plan, ArtifactError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ArtifactError::Parse(e.to_string()))?;
        let format = value.get("format").and_then(|f| f.as_str());
        if format.is_some_and(|f| f != FORMAT) {
            return Err(ArtifactError::Invalid(format!("format is '{}', expected '{FORMAT}'", format.unwrap_or(""))));
        }
        if let Some(v) = value.get("version").and_then(|v| v.as_u64()).filter(|&v| v != VERSION as u64) {
            return Err(ArtifactError::Invalid(format!(
                "schema version {v} is not supported (this runtime reads {VERSION}); recompile the model"
            )));
        }
        let plan: Plan = serde_json::from_value(value).map_err(|e| ArtifactError::Parse(e.to_string()))?;
        plan.check()?;
        Ok(plan)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plan serializes")
    }

    /// Structural checks: version, every index in range, every binding inside its buffer and aligned, kernel
    /// paths inside the artifact directory.
    pub fn check(&self) -> Result<(), ArtifactError> {
        let bad = |m: String| Err(ArtifactError::Invalid(m));
        if self.format != FORMAT {
            return bad(format!("format is '{}', expected '{FORMAT}'", self.format));
        }
        if self.version != VERSION {
            return bad(format!("schema version {} is not supported (this runtime reads {VERSION})", self.version));
        }
        for b in &self.buffers {
            if b.size == 0 || b.size % 4 != 0 {
                return bad(format!("buffer '{}' has size {}, not a positive multiple of 4", b.name, b.size));
            }
        }
        for (what, specs, kind) in
            [("input", &self.inputs, BufferKind::Input), ("output", &self.outputs, BufferKind::Output)]
        {
            for t in specs {
                let Some(b) = self.buffers.get(t.buffer) else {
                    return bad(format!("{what} '{}' names buffer {} of {}", t.name, t.buffer, self.buffers.len()));
                };
                let bytes = t.shape.iter().try_fold(4u64, |a, &d| a.checked_mul(d as u64));
                if b.kind != kind || bytes.is_none_or(|n| n > b.size) {
                    return bad(format!("{what} '{}' does not fit its buffer '{}'", t.name, b.name));
                }
            }
        }
        for w in &self.weights {
            let bytes = w.shape.iter().try_fold(4u64, |a, &d| a.checked_mul(d as u64));
            let fits = match (self.buffers.get(w.buffer), bytes) {
                (Some(b), Some(n)) => {
                    b.kind == BufferKind::Weight && w.offset.checked_add(n).is_some_and(|e| e <= b.size)
                }
                _ => false,
            };
            if !fits || w.offset % 256 != 0 {
                return bad(format!("weight '{}' is outside its weight buffer or misaligned", w.name));
            }
        }
        // A decoder step that writes the cache in place writes the cache inputs' buffers, and only those.
        let caches: Vec<usize> = match &self.decoder {
            Some(d) if d.steps.iter().any(|st| st.cache_row.is_some()) => {
                d.state.iter().filter_map(|s| self.inputs.get(s.input)).map(|t| t.buffer).collect()
            }
            _ => vec![],
        };
        // A step's advance kernels write its loop inputs and the token history, and only those.
        let mut advancers = Vec::new();
        let mut loop_inputs = Vec::new();
        for (st, a) in self.decoder.iter().flat_map(|d| d.steps.iter().filter_map(|st| Some((st, st.advance?)))) {
            advancers.extend([a.greedy, a.sample]);
            let ins = [Some(st.input_ids), st.cache_row, Some(st.attention_mask), st.position_ids];
            let history = self.decoder.as_ref().and_then(|d| d.tokens);
            loop_inputs.extend(ins.into_iter().chain([history]).flatten().filter_map(|i| self.inputs.get(i)));
        }
        for (ki, k) in self.kernels.iter().enumerate() {
            for path in std::iter::once(&k.wgsl).chain(&k.subgroups) {
                let p = Path::new(path);
                if p.is_absolute() || p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
                    return bad(format!("kernel '{}' has a path outside the artifact: '{path}'", k.name));
                }
            }
            if k.workgroups.iter().any(|&w| w > 65535) {
                return bad(format!("kernel '{}' dispatches {:?} workgroups", k.name, k.workgroups));
            }
            for (i, b) in k.bindings.iter().enumerate() {
                let Some(buf) = self.buffers.get(b.buffer) else {
                    return bad(format!("kernel '{}' binds buffer {} of {}", k.name, b.buffer, self.buffers.len()));
                };
                if b.binding as usize != i {
                    return bad(format!("kernel '{}': bindings must be numbered 0..n in order", k.name));
                }
                if b.offset % 256 != 0
                    || b.size == 0
                    || b.size % 4 != 0
                    || b.offset.checked_add(b.size).is_none_or(|e| e > buf.size)
                {
                    return bad(format!(
                        "kernel '{}' binding {} ({}+{}) is outside buffer '{}' ({} bytes) or misaligned",
                        k.name, b.binding, b.offset, b.size, buf.name, buf.size
                    ));
                }
                let cache = buf.kind == BufferKind::Input && caches.contains(&b.buffer);
                let advanced = advancers.contains(&ki) && loop_inputs.iter().any(|t| t.buffer == b.buffer);
                if b.access == Access::ReadWrite
                    && matches!(buf.kind, BufferKind::Weight | BufferKind::Input)
                    && !cache
                    && !advanced
                {
                    return bad(format!("kernel '{}' writes {:?} buffer '{}'", k.name, buf.kind, buf.name));
                }
            }
            // WebGPU: one buffer may not be bound read-only and read-write in one dispatch, and writable bindings
            // must not alias.
            for (i, w) in k.bindings.iter().enumerate().filter(|(_, b)| b.access == Access::ReadWrite) {
                if k.bindings.iter().any(|r| r.access == Access::Read && r.buffer == w.buffer) {
                    return bad(format!("kernel '{}' binds buffer {} both read-only and read-write", k.name, w.buffer));
                }
                let overlaps = |r: &Binding| r.offset < w.offset + w.size && w.offset < r.offset + r.size;
                if k.bindings[i + 1..]
                    .iter()
                    .any(|r| r.buffer == w.buffer && r.access == Access::ReadWrite && overlaps(r))
                {
                    return bad(format!(
                        "kernel '{}' binds overlapping writable ranges of buffer {}",
                        k.name, w.buffer
                    ));
                }
            }
        }
        if let Some(&d) = self.dispatches.iter().find(|&&d| d >= self.kernels.len()) {
            return bad(format!("dispatch names kernel {d} of {}", self.kernels.len()));
        }
        if let Some(d) = &self.decoder {
            self.check_decoder(d)?;
        }
        self.check_ranges()
    }

    /// Ranged dims: each `1 <= min <= max`, the values' buffer an input buffer that holds them, each ranged axis
    /// of a tensor in its shape at `factor · max`, and every dim found in some input.
    fn check_ranges(&self) -> Result<(), ArtifactError> {
        let bad = |m: String| Err(ArtifactError::Invalid(format!("ranges: {m}")));
        let dims = self.ranges.as_ref().map_or(&[][..], |r| &r.dims[..]);
        if let Some(r) = &self.ranges {
            if !self
                .buffers
                .get(r.buffer)
                .is_some_and(|b| b.kind == BufferKind::Input && b.size >= 4 * r.dims.len() as u64)
            {
                return bad(format!("buffer {} cannot hold the dims' values", r.buffer));
            }
            for d in &r.dims {
                if d.min == 0 || d.min > d.max {
                    return bad(format!("dim '{}' has range {}..{}", d.name, d.min, d.max));
                }
                if !self.inputs.iter().any(|t| t.ranged.iter().any(|a| r.dims.get(a.dim) == Some(d))) {
                    return bad(format!("dim '{}' is in no input's shape", d.name));
                }
            }
        }
        for k in &self.kernels {
            if k.scale.is_some_and(|s| s.axis > 2 || s.dim >= dims.len()) {
                return bad(format!("kernel '{}' scales its workgroups by a dim or axis the plan lacks", k.name));
            }
        }
        if let Some(r) = self.ranges.as_ref().filter(|r| !r.buckets.is_empty()) {
            self.check_buckets(r)?;
        }
        for t in self.inputs.iter().chain(&self.outputs) {
            for a in &t.ranged {
                let fits = dims.get(a.dim).is_some_and(|d| {
                    a.factor > 0 && t.shape.get(a.axis).is_some_and(|&e| Some(e) == a.factor.checked_mul(d.max))
                });
                if !fits {
                    return bad(format!("'{}' axis {} does not follow a dim of the plan", t.name, a.axis));
                }
            }
        }
        Ok(())
    }

    /// Buckets: one dim, cut into consecutive ranges from its min to its max, each bucket's dispatches kernels of
    /// its own, the last bucket's the plan's `dispatches`.
    fn check_buckets(&self, r: &Ranges) -> Result<(), ArtifactError> {
        let bad = |m: String| Err(ArtifactError::Invalid(format!("ranges: buckets: {m}")));
        let [d] = &r.dims[..] else {
            return bad(format!("{} dims; buckets cut exactly one", r.dims.len()));
        };
        let mut next = d.min;
        let mut owner: Vec<Option<usize>> = vec![None; self.kernels.len()];
        for (i, b) in r.buckets.iter().enumerate() {
            if b.min != next || b.max < b.min || b.max > d.max {
                return bad(format!(
                    "bucket {i} holds {}..{}, expected a range from {next} to at most {}",
                    b.min, b.max, d.max
                ));
            }
            next = b.max + 1;
            for &k in &b.dispatches {
                match owner.get_mut(k) {
                    Some(o @ None) => *o = Some(i),
                    Some(Some(j)) if *j == i => {}
                    Some(Some(j)) => return bad(format!("kernel {k} is dispatched by buckets {j} and {i}")),
                    None => return bad(format!("bucket {i} dispatches kernel {k} of {}", self.kernels.len())),
                }
            }
        }
        if next != d.max + 1 {
            return bad(format!("they end at {}, not at '{}''s max {}", next - 1, d.name, d.max));
        }
        if r.buckets.last().is_some_and(|b| b.dispatches != self.dispatches) {
            return bad("the plan's dispatches are not the last bucket's".into());
        }
        Ok(())
    }

    /// The decoder section: indices in range, the caches and the token history of the capacity's rows, the chosen
    /// tokens single integers, advance kernels of their own, and the program (see `Plan::check_program`; what it
    /// writes and copies is checked against the buffers as it runs).
    fn check_decoder(&self, d: &Decoder) -> Result<(), ArtifactError> {
        let bad = |m: String| Err(ArtifactError::Invalid(format!("decoder: {m}")));
        if d.capacity != d.rows + 1 || d.rows == 0 {
            return bad(format!("capacity {} with {} cache rows", d.capacity, d.rows));
        }
        let input = |i: usize| self.inputs.get(i);
        let output = |i: usize| self.outputs.get(i);
        let cache_rows = if d.steps.iter().any(|st| st.cache_row.is_some()) { d.capacity } else { d.rows };
        for s in &d.state {
            match input(s.input) {
                Some(t) if s.axis < t.shape.len() && t.shape[s.axis] == cache_rows && t.storage == StorageType::F32 => {
                }
                _ => return bad(format!("state input {} is not a float cache of {cache_rows} rows", s.input)),
            }
        }
        if let Some(t) = d.tokens {
            if !input(t)
                .is_some_and(|t| t.shape.iter().product::<usize>() == d.capacity && t.storage != StorageType::F32)
            {
                return bad(format!("the token history (input {t}) is not {} integers", d.capacity));
            }
        }
        for st in &d.steps {
            let n = st.tokens;
            if n == 0 || n > d.rows || st.dispatches.iter().any(|&k| k >= self.kernels.len()) {
                return bad(format!("step '{}' has {n} tokens or a dispatch out of range", st.name));
            }
            let len = |t: &TensorSpec| t.shape.iter().product::<usize>();
            let word = |t: &TensorSpec| t.storage != StorageType::F32;
            if !output(st.next_token).is_some_and(|t| len(t) == 1 && word(t)) || output(st.logits).is_none() {
                return bad(format!("step '{}': next_token or logits is not a valid output", st.name));
            }
            if let Some(sm) = &st.sample {
                let fits = output(sm.token).is_some_and(|t| len(t) == 1 && word(t))
                    && input(sm.temperature).is_some_and(|t| len(t) == 1 && !word(t))
                    && input(sm.params).is_some_and(|t| len(t) == 2 && word(t))
                    && sm.dispatches.iter().all(|&k| k < self.kernels.len());
                if !fits {
                    return bad(format!("step '{}': the sampling token, inputs or dispatches are not valid", st.name));
                }
            }
            if let Some(a) = st.advance {
                let fits = n == 1
                    && st.cache_row.is_some()
                    && d.tokens.is_some()
                    && [a.greedy, a.sample].iter().all(|&k| k < self.kernels.len() && !self.dispatches.contains(&k));
                if !fits {
                    return bad(format!(
                        "step '{}' advances on the GPU: it needs one token, a cache row, the token history and \
                         advance kernels of its own",
                        st.name
                    ));
                }
            }
        }
        d.program.as_ref().map_or(Ok(()), |p| self.check_program(p, &d.steps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// plan.json spells a dtype as `Dtype::name` does (messages use the name; serde the same word).
    #[test]
    fn dtype_names_are_their_json() {
        for name in ["float32", "float16", "bfloat16", "int64", "uint4", "bool", "float8e4m3fnuz"] {
            let d: Dtype = serde_json::from_str(&format!("\"{name}\"")).unwrap();
            assert_eq!(d.name(), name);
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{name}\""));
        }
        assert!(serde_json::from_str::<Dtype>("\"float99\"").is_err());
    }

    fn plan() -> Plan {
        Plan {
            format: FORMAT.into(),
            version: VERSION,
            inputs: vec![],
            outputs: vec![],
            buffers: vec![Buffer { name: "a".into(), size: 16, kind: BufferKind::Intermediate }],
            weights: vec![],
            kernels: vec![Kernel {
                name: "k".into(),
                wgsl: "kernels/k.wgsl".into(),
                subgroups: None,
                entry_point: "main".into(),
                bindings: vec![Binding { binding: 0, buffer: 0, offset: 0, size: 16, access: Access::ReadWrite }],
                workgroups: [1, 1, 1],
                scale: None,
            }],
            dispatches: vec![0],
            decoder: None,
            ranges: None,
        }
    }

    #[test]
    fn a_valid_plan_round_trips() {
        let p = plan();
        p.check().unwrap();
        let back: Plan = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn tampered_plans_are_refused() {
        let mut p = plan();
        p.kernels[0].bindings[0].size = 32;
        assert!(p.check().unwrap_err().to_string().contains("outside buffer"));
        let mut p = plan();
        p.kernels[0].wgsl = "../../etc/passwd".into();
        assert!(p.check().unwrap_err().to_string().contains("outside the artifact"));
        let mut p = plan();
        p.kernels[0].subgroups = Some("kernels/../../k.wgsl".into());
        assert!(p.check().unwrap_err().to_string().contains("outside the artifact"));
        let mut p = plan();
        p.version = 99;
        assert!(p.check().unwrap_err().to_string().contains("version 99"));
        let mut p = plan();
        p.dispatches = vec![3];
        assert!(p.check().is_err());
        let mut p = plan();
        p.kernels[0].bindings.push(Binding { binding: 1, buffer: 0, offset: 0, size: 4, access: Access::ReadWrite });
        assert!(p.check().unwrap_err().to_string().contains("overlapping writable"));
        let mut p = plan();
        p.kernels[0].bindings.push(Binding { binding: 1, buffer: 0, offset: 0, size: 4, access: Access::Read });
        assert!(p.check().unwrap_err().to_string().contains("both read-only and read-write"));
        let mut p = plan();
        p.weights.push(WeightSpec {
            name: "w".into(),
            shape: vec![2],
            storage: StorageType::F32,
            buffer: 0,
            offset: 0,
        });
        assert!(p.check().unwrap_err().to_string().contains("outside its weight buffer"));
    }

    /// Buckets cut one dim from its min to its max without gaps, each kernel in one bucket, the last bucket's
    /// dispatches the plan's; anything else is refused.
    #[test]
    fn buckets_must_cut_the_range_and_own_their_kernels() {
        let mut p = plan();
        p.buffers.push(Buffer { name: "x".into(), size: 64, kind: BufferKind::Input });
        p.inputs.push(TensorSpec {
            name: "x".into(),
            dtype: Dtype::Float32,
            shape: vec![16],
            storage: StorageType::F32,
            buffer: 1,
            ranged: vec![RangedAxis { axis: 0, dim: 0, factor: 1 }],
        });
        p.kernels.push(Kernel { name: "k2".into(), ..p.kernels[0].clone() });
        let b = |min, max, k: &[usize]| Bucket { min, max, dispatches: k.to_vec() };
        let dims = vec![DimRange { name: "n".into(), min: 1, max: 16 }];
        p.ranges = Some(Ranges { dims, buffer: 1, buckets: vec![b(1, 4, &[1]), b(5, 16, &[0])] });
        p.check().unwrap();
        for (buckets, want) in [
            (vec![b(1, 4, &[1]), b(6, 16, &[0])], "bucket 1 holds 6..16"),
            (vec![b(1, 4, &[1]), b(5, 15, &[0])], "they end at 15"),
            (vec![b(1, 4, &[0]), b(5, 16, &[0])], "kernel 0 is dispatched by buckets 0 and 1"),
            (vec![b(1, 4, &[0]), b(5, 16, &[1])], "the plan's dispatches are not the last bucket's"),
            (vec![b(1, 4, &[7]), b(5, 16, &[0])], "bucket 0 dispatches kernel 7"),
        ] {
            let mut q = p.clone();
            q.ranges.as_mut().unwrap().buckets = buckets;
            let e = q.check().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
