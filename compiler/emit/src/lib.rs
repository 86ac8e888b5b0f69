//! WGSL emission and artifact writing.
//!
//! **Architecture Invariant:** nothing is written that naga has not parsed and validated, and nothing is written
//! that breaks the [`Limits`] it was compiled for: [`emit`] returns [`Validated`] kernels only, and
//! [`write_artifact`] takes nothing else. All WGSL comes from the askama templates in `templates/`; this crate
//! decides every extent, stride and literal and the templates only substitute them.

mod kernels;
pub mod report;

pub use kernels::{advance, Advance, EmittedKernel, GridAxis, Walks};

use std::collections::BTreeMap;
use std::path::Path;
use wgslc_artifact as art;
use wgslc_ir::{bf16_bits, f16_bits, Data, Graph, ValueId};
use wgslc_passes::{binding_access, narrow_of, storage_of, BufferKind, MemoryPlan, Narrow, Schedule, Storage};

/// The device limits a compile targets. [`Limits::default`] is WebGPU's default limits, which every WebGPU
/// device supports. As JSON (`--limits FILE.json`), WebGPU's names: `maxStorageBuffersPerShaderStage`,
/// `maxStorageBufferBindingSize`, `maxBufferSize`, `maxComputeWorkgroupStorageSize`,
/// `maxComputeInvocationsPerWorkgroup`, `maxComputeWorkgroupsPerDimension`; any left out keep the default.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    #[serde(rename = "maxComputeWorkgroupsPerDimension")]
    pub max_workgroups_per_dimension: u32,
}

impl Limits {
    /// Limits from JSON (see [`Limits`]); a limit WebGPU could not have (zero, or a binding larger than a
    /// buffer) is refused by name.
    pub fn from_json(text: &str) -> Result<Limits, String> {
        let l: Limits = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let zero = [
            ("maxStorageBuffersPerShaderStage", l.max_storage_buffers_per_shader_stage as u64),
            ("maxStorageBufferBindingSize", l.max_storage_buffer_binding_size),
            ("maxBufferSize", l.max_buffer_size),
            ("maxComputeInvocationsPerWorkgroup", l.max_compute_invocations_per_workgroup as u64),
            ("maxComputeWorkgroupsPerDimension", l.max_workgroups_per_dimension as u64),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if l.max_storage_buffer_binding_size > l.max_buffer_size {
            return Err("maxStorageBufferBindingSize is larger than maxBufferSize".into());
        }
        Ok(l)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_storage_buffers_per_shader_stage: 8,
            max_storage_buffer_binding_size: 128 << 20,
            max_buffer_size: 256 << 20,
            max_compute_workgroup_storage_size: 16384,
            max_compute_invocations_per_workgroup: 256,
            max_workgroups_per_dimension: 65535,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("node '{node}' ({op}): {reason}")]
    Node { node: String, op: String, reason: String },
    #[error("kernel '{kernel}' is not valid WGSL (a wgslc bug):\n{message}")]
    InvalidWgsl { kernel: String, message: String },
    #[error("kernel '{kernel}' exceeds a device limit: {reason}")]
    Limit { kernel: String, reason: String },
    #[error("buffer '{buffer}' needs {size} bytes, more than the device's maximum buffer size {max}")]
    BufferTooLarge { buffer: String, size: u64, max: u64 },
    #[error("cannot write '{path}': {source}")]
    Io { path: String, source: std::io::Error },
    #[error("cannot write weights: {0}")]
    Weights(String),
    #[error("kernel '{0}': plan.json and its modules disagree (a wgslc bug)")]
    Modules(String),
}

/// A kernel whose WGSL naga has validated and whose resources fit the limits.
#[derive(Clone, Debug)]
pub struct Validated {
    pub kernel: EmittedKernel,
    /// Invocations per workgroup.
    pub workgroup_size: [u32; 3],
    /// Bytes of workgroup memory.
    pub workgroup_memory: u32,
    /// The element stride of each binding's array, by binding number (4 for `array<f32>`, 16 for
    /// `array<vec4<u32>>`): WebGPU sizes a runtime array as the binding's bytes divided by it, rounded down, so a
    /// binding whose size is not a multiple loses its tail (Tint clamps reads there; [`emit`] refuses such a plan).
    pub strides: Vec<u32>,
}

/// What kernels may use beyond naga's baseline: core WebGPU's `pack2x16float`/`unpack2x16float` (float16 values
/// held in 32-bit words, how narrow weights are read), which naga puts behind a capability of its own. Nothing
/// else: no `shader-f16`; subgroups only in a kernel's second module ([`SUBGROUP_CAPABILITIES`]).
pub const CAPABILITIES: naga::valid::Capabilities = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;

/// What a kernel's subgroup module ([`EmittedKernel::subgroups`]) may use: [`CAPABILITIES`] and WebGPU's
/// `subgroups` feature.
pub const SUBGROUP_CAPABILITIES: naga::valid::Capabilities = CAPABILITIES.union(naga::valid::Capabilities::SUBGROUP);

/// What a subgroup module's workgroup is a multiple of: WebGPU's smallest subgroup (4), so that it is whole
/// subgroups on every device whose subgroups are no larger than it. Where a device's are (a workgroup of 64, a
/// subgroup of 128), it is one partial subgroup, which the templates' code allows: their butterflies stay within
/// the workgroup's lanes and their reductions count at least one subgroup.
pub const SUBGROUP_WORKGROUP: u32 = 4;

/// One module parsed and validated by naga with `caps`.
fn parse_module(name: &str, wgsl: &str, caps: naga::valid::Capabilities) -> Result<naga::Module, EmitError> {
    let invalid = |message: String| EmitError::InvalidWgsl { kernel: name.to_string(), message };
    let wgsl = &art::for_naga(wgsl);
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| invalid(e.emit_to_string(wgsl)))?;
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| invalid(e.emit_to_string(wgsl)))?;
    Ok(module)
}

/// Bytes of workgroup memory a module declares.
fn workgroup_bytes(module: &naga::Module) -> u32 {
    module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .map(|(_, v)| module.types[v.ty].inner.size(module.to_ctx()))
        .sum()
}

/// Parses and validates a kernel's modules with naga, and checks them against the limits: its subgroup module,
/// if any, has the same workgroup size (a multiple of [`SUBGROUP_WORKGROUP`]) and bindings.
pub fn validate(kernel: EmittedKernel, limits: &Limits) -> Result<Validated, EmitError> {
    let module = parse_module(&kernel.name, &kernel.wgsl, CAPABILITIES)?;
    let limit = |reason: String| EmitError::Limit { kernel: kernel.name.clone(), reason };
    let ep =
        module.entry_points.iter().find(|e| e.name == "main").ok_or_else(|| limit("no entry point 'main'".into()))?;
    let workgroup_size = ep.workgroup_size;
    let invocations: u32 = workgroup_size.iter().product();
    if invocations > limits.max_compute_invocations_per_workgroup {
        return Err(limit(format!("{invocations} invocations per workgroup")));
    }
    let mut workgroup_memory = workgroup_bytes(&module);
    let strides = binding_strides(&module, kernel.bindings.len());
    if let Some(sg) = &kernel.subgroups {
        let sm = parse_module(&kernel.name, sg, SUBGROUP_CAPABILITIES)?;
        let same_size = sm.entry_points.iter().any(|e| e.name == "main" && e.workgroup_size == workgroup_size);
        let storage = |m: &naga::Module| {
            m.global_variables.iter().filter(|(_, v)| matches!(v.space, naga::AddressSpace::Storage { .. })).count()
        };
        let same_bindings = storage(&sm) == storage(&module) && binding_strides(&sm, kernel.bindings.len()) == strides;
        if !same_size || !invocations.is_multiple_of(SUBGROUP_WORKGROUP) || !same_bindings {
            return Err(EmitError::InvalidWgsl {
                kernel: kernel.name.clone(),
                message: "its subgroup module differs in workgroup size or bindings, or is not whole subgroups".into(),
            });
        }
        workgroup_memory = workgroup_memory.max(workgroup_bytes(&sm));
    }
    if workgroup_memory > limits.max_compute_workgroup_storage_size {
        return Err(limit(format!("{workgroup_memory} bytes of workgroup memory")));
    }
    let storage =
        module.global_variables.iter().filter(|(_, v)| matches!(v.space, naga::AddressSpace::Storage { .. })).count();
    if storage as u32 > limits.max_storage_buffers_per_shader_stage || kernel.bindings.len() != storage {
        return Err(limit(format!(
            "{storage} storage buffers (at most {})",
            limits.max_storage_buffers_per_shader_stage
        )));
    }
    if let Some(w) = kernel.workgroups.iter().find(|&&w| w > limits.max_workgroups_per_dimension) {
        return Err(limit(format!("{w} workgroups in one dimension")));
    }
    Ok(Validated { kernel, workgroup_size, workgroup_memory, strides })
}

/// The element stride of each of a module's `n` storage bindings, by binding number (4 where it declares none).
fn binding_strides(module: &naga::Module, n: usize) -> Vec<u32> {
    let mut strides = vec![4; n];
    for (_, v) in module.global_variables.iter() {
        if let (naga::AddressSpace::Storage { .. }, Some(b)) = (v.space, &v.binding) {
            let stride = match module.types[v.ty].inner {
                naga::TypeInner::Array { stride, .. } => stride,
                ref t => t.size(module.to_ctx()),
            };
            if let Some(s) = strides.get_mut(b.binding as usize) {
                *s = stride;
            }
        }
    }
    strides
}

/// Emits and validates every kernel of a scheduled, planned graph, in dispatch order.
pub fn emit(g: &Graph, sched: &Schedule, plan: &MemoryPlan, limits: &Limits) -> Result<Vec<Validated>, EmitError> {
    for b in &plan.buffers {
        if b.size > limits.max_buffer_size {
            return Err(EmitError::BufferTooLarge {
                buffer: b.name.clone(),
                size: b.size,
                max: limits.max_buffer_size,
            });
        }
    }
    let em = kernels::Emitter { g, limits, sched, plan };
    let mut out = Vec::new();
    for group in &sched.kernels {
        {
            for k in em.emit_group(group)? {
                for &(v, _) in &k.bindings {
                    let size = plan.slots[&v].size;
                    if size > limits.max_storage_buffer_binding_size {
                        return Err(EmitError::Limit {
                            kernel: k.name.clone(),
                            reason: format!(
                                "binds '{}' of {size} bytes, more than the {} bytes one binding may hold",
                                g.value(v).name,
                                limits.max_storage_buffer_binding_size
                            ),
                        });
                    }
                }
                check_aliasing(g, plan, &k)?;
                let k = validate(k, limits)?;
                for (&(v, _), &stride) in k.kernel.bindings.iter().zip(&k.strides) {
                    let size = plan.slots[&v].size;
                    if !size.is_multiple_of(stride as u64) {
                        return Err(EmitError::Limit {
                            kernel: k.kernel.name.clone(),
                            reason: format!(
                                "binds '{}' as {size} bytes, not a whole number of its {stride}-byte elements \
                                 (a planner bug: the tail would be out of bounds)",
                                g.value(v).name
                            ),
                        });
                    }
                }
                out.push(k);
            }
        }
    }
    Ok(out)
}

/// WebGPU forbids writable bindings that alias: with the kernel's output in an arena, every binding in that arena
/// is writable, so each tensor there must be bound once.
fn check_aliasing(g: &Graph, plan: &MemoryPlan, k: &EmittedKernel) -> Result<(), EmitError> {
    let rw = binding_access(plan, &k.bindings);
    for (i, &(v, _)) in k.bindings.iter().enumerate() {
        let s = plan.slots[&v];
        for (j, &(u, _)) in k.bindings.iter().enumerate().skip(i + 1) {
            let t = plan.slots[&u];
            if (rw[i] || rw[j]) && s.buffer == t.buffer && s.offset < t.offset + t.size && t.offset < s.offset + s.size
            {
                return Err(EmitError::Limit {
                    kernel: k.name.clone(),
                    reason: format!(
                        "binds '{}' and '{}' at overlapping writable ranges (an emitter bug)",
                        g.value(v).name,
                        g.value(u).name
                    ),
                });
            }
        }
    }
    Ok(())
}

fn storage_type(s: Storage) -> art::StorageType {
    match s {
        Storage::F32 => art::StorageType::F32,
        Storage::I32 => art::StorageType::I32,
        Storage::U32 => art::StorageType::U32,
    }
}

/// The artifact's name for an IR dtype (the same words: ONNX's, lowercase).
fn dtype(d: wgslc_ir::DType) -> art::Dtype {
    use wgslc_ir::DType as D;
    match d {
        D::F32 => art::Dtype::Float32,
        D::F16 => art::Dtype::Float16,
        D::BF16 => art::Dtype::Bfloat16,
        D::F64 => art::Dtype::Float64,
        D::F8E4M3FN => art::Dtype::Float8e4m3fn,
        D::F8E4M3FNUZ => art::Dtype::Float8e4m3fnuz,
        D::F8E5M2 => art::Dtype::Float8e5m2,
        D::F8E5M2FNUZ => art::Dtype::Float8e5m2fnuz,
        D::F4E2M1 => art::Dtype::Float4e2m1,
        D::I64 => art::Dtype::Int64,
        D::I32 => art::Dtype::Int32,
        D::I16 => art::Dtype::Int16,
        D::I8 => art::Dtype::Int8,
        D::U8 => art::Dtype::Uint8,
        D::U16 => art::Dtype::Uint16,
        D::U32 => art::Dtype::Uint32,
        D::U64 => art::Dtype::Uint64,
        D::I4 => art::Dtype::Int4,
        D::U4 => art::Dtype::Uint4,
        D::I2 => art::Dtype::Int2,
        D::U2 => art::Dtype::Uint2,
        D::Bool => art::Dtype::Bool,
    }
}

/// Builds the plan.json content.
pub fn build_plan(g: &Graph, plan: &MemoryPlan, kernels: &[Validated]) -> art::Plan {
    let spec = |v: ValueId| {
        let ty = g.ty(v);
        art::TensorSpec {
            name: g.value(v).name.clone(),
            dtype: dtype(ty.dtype),
            shape: ty.shape.clone(),
            storage: storage_type(storage_of(ty.dtype).expect("legalized")),
            buffer: plan.slots[&v].buffer,
            ranged: Vec::new(),
        }
    };
    let buffers = plan
        .buffers
        .iter()
        .map(|b| art::Buffer {
            name: b.name.clone(),
            size: b.size,
            kind: match b.kind {
                BufferKind::Input(_) => art::BufferKind::Input,
                BufferKind::Output(_) => art::BufferKind::Output,
                BufferKind::Weights => art::BufferKind::Weight,
                BufferKind::Intermediate => art::BufferKind::Intermediate,
            },
        })
        .collect();
    let kernels: Vec<art::Kernel> = kernels
        .iter()
        .enumerate()
        .map(|(i, k)| art::Kernel {
            name: k.kernel.name.clone(),
            wgsl: kernel_path(i, &k.kernel),
            subgroups: k
                .kernel
                .subgroups
                .as_ref()
                .map(|_| kernel_path(i, &k.kernel).replace(".wgsl", ".subgroups.wgsl")),
            entry_point: "main".into(),
            scale: None,
            bindings: k
                .kernel
                .bindings
                .iter()
                .enumerate()
                .zip(binding_access(plan, &k.kernel.bindings))
                .map(|((b, &(v, _)), rw)| {
                    let s = plan.slots[&v];
                    art::Binding {
                        binding: b as u32,
                        buffer: s.buffer,
                        offset: s.offset,
                        size: s.size,
                        access: if rw { art::Access::ReadWrite } else { art::Access::Read },
                    }
                })
                .collect(),
            workgroups: k.kernel.workgroups,
        })
        .collect();
    // Tensor names in weights.safetensors must be unique; value names normally are, but nothing forces a model to.
    let mut used = std::collections::HashSet::new();
    let mut unique = |name: &str| {
        let mut n = name.to_string();
        let mut k = 1;
        while !used.insert(n.clone()) {
            n = format!("{name}#{k}");
            k += 1;
        }
        n
    };
    art::Plan {
        format: art::FORMAT.into(),
        version: art::VERSION,
        inputs: g.inputs.iter().map(|&v| spec(v)).collect(),
        outputs: g.outputs.iter().map(|&v| spec(v)).collect(),
        buffers,
        weights: plan
            .weights
            .iter()
            .map(|&(v, s)| {
                let ty = g.ty(v);
                // A narrow constant is a run of 32-bit words (its elements packed; the kernels decode them).
                let (shape, storage) = match narrow_of(g, v) {
                    Some(n) => (vec![(n.bytes(ty.numel()) / 4) as usize], art::StorageType::U32),
                    None => (ty.shape.clone(), storage_type(storage_of(ty.dtype).expect("legalized"))),
                };
                art::WeightSpec { name: unique(&g.value(v).name), shape, storage, buffer: s.buffer, offset: s.offset }
            })
            .collect(),
        dispatches: (0..kernels.len()).collect(),
        decoder: None,
        ranges: None,
        kernels,
    }
}

fn kernel_path(i: usize, k: &EmittedKernel) -> String {
    format!("kernels/k{i:03}_{}.wgsl", k.kind)
}

/// Every constant of a plan's weights in its storage bytes, by the name the plan gives it (`p`: [`build_plan`]'s
/// for this graph and memory plan): what weights.safetensors holds.
pub fn weight_tensors(g: &Graph, plan: &MemoryPlan, p: &art::Plan) -> Result<WeightTensors, EmitError> {
    let mut bytes = WeightTensors::new();
    for (&(v, _), spec) in plan.weights.iter().zip(&p.weights) {
        let t = g.const_data(v).expect("weight buffers hold constants");
        let words = |w: Vec<u32>| w.into_iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (dtype, data): (safetensors::Dtype, Vec<u8>) = match (&t.data, narrow_of(g, v)) {
            // Narrow constants are words the kernels decode (wgslc_ir::narrow).
            (Data::Blocks(b), _) => (safetensors::Dtype::U32, words(b.words())),
            (Data::F32(x), Some(Narrow::Half(d))) => {
                let half = |x: f32| if d == wgslc_ir::DType::BF16 { bf16_bits(x) } else { f16_bits(x) };
                let pairs = x.chunks(2).map(|p| half(p[0]) as u32 | (p.get(1).map_or(0, |&y| half(y)) as u32) << 16);
                (safetensors::Dtype::U32, words(pairs.collect()))
            }
            (Data::F32(x), _) => (safetensors::Dtype::F32, x.iter().flat_map(|f| f.to_le_bytes()).collect()),
            // Range-checked by legalization.
            (Data::I64(x), _) => (safetensors::Dtype::I32, x.iter().flat_map(|&i| (i as i32).to_le_bytes()).collect()),
            (Data::Bool(x), _) => (safetensors::Dtype::U32, x.iter().flat_map(|&b| (b as u32).to_le_bytes()).collect()),
        };
        if bytes.insert(spec.name.clone(), WeightTensor { dtype, shape: spec.shape.clone(), data }).is_some() {
            return Err(EmitError::Weights(format!("two constants are named '{}'", spec.name)));
        }
    }
    Ok(bytes)
}

/// One tensor of weights.safetensors: its storage dtype, shape and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightTensor {
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// weights.safetensors' tensors by name, in name order (the file's order).
pub type WeightTensors = BTreeMap<String, WeightTensor>;

/// Writes DIR/plan.json (`p`: [`build_plan`]'s, with any sections the driver adds, written once), DIR/kernels/*.wgsl
/// and DIR/weights.safetensors, replacing files of those names and deleting nothing (the driver writes into a
/// fresh directory and moves the artifact into place). Output is byte-identical for the same inputs (deterministic
/// order everywhere), and every file gets the permissions a new file gets (the safetensors writer would make the
/// weights private to their owner).
pub fn write_artifact(
    dir: &Path,
    g: &Graph,
    plan: &MemoryPlan,
    kernels: &[Validated],
    p: &art::Plan,
) -> Result<(), EmitError> {
    let sources: Vec<KernelSource> = kernels.iter().map(KernelSource::of).collect();
    write_files(dir, p, &sources, &weight_tensors(g, plan, p)?)
}

/// A kernel's modules: its WGSL and, where it has one, its subgroup module ([`art::Kernel::subgroups`]).
#[derive(Clone, Debug)]
pub struct KernelSource {
    pub wgsl: String,
    pub subgroups: Option<String>,
}

impl KernelSource {
    pub fn of(k: &Validated) -> KernelSource {
        KernelSource { wgsl: k.kernel.wgsl.clone(), subgroups: k.kernel.subgroups.clone() }
    }
}

/// [`write_artifact`] from its parts: the plan, each of its kernels' modules (in `p.kernels`' order) and the
/// weights.
pub fn write_files(
    dir: &Path,
    p: &art::Plan,
    sources: &[KernelSource],
    weights: &WeightTensors,
) -> Result<(), EmitError> {
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| EmitError::Io { path: path.clone(), source }
    };
    let kdir = dir.join("kernels");
    std::fs::create_dir_all(&kdir).map_err(io(&kdir))?;
    for (source, pk) in sources.iter().zip(&p.kernels) {
        let modules = [(Some(&pk.wgsl), Some(&source.wgsl)), (pk.subgroups.as_ref(), source.subgroups.as_ref())];
        for (file, text) in modules {
            match (file, text) {
                (Some(file), Some(text)) => {
                    let path = dir.join(file);
                    std::fs::write(&path, text).map_err(io(&path))?;
                }
                (None, None) => {}
                _ => return Err(EmitError::Modules(pk.name.clone())),
            }
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = weights
        .iter()
        .map(|(name, w)| {
            safetensors::tensor::TensorView::new(w.dtype, w.shape.clone(), &w.data)
                .map(|v| (name.clone(), v))
                .map_err(|e| EmitError::Weights(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let wpath = dir.join("weights.safetensors");
    safetensors::tensor::serialize_to_file(views, None, &wpath).map_err(|e| EmitError::Weights(e.to_string()))?;

    let ppath = dir.join("plan.json");
    std::fs::write(&ppath, p.to_json() + "\n").map_err(io(&ppath))?;
    let perms = std::fs::metadata(&ppath).map_err(io(&ppath))?.permissions();
    std::fs::set_permissions(&wpath, perms).map_err(io(&wpath))?;
    Ok(())
}
