//! The wgslc runtime: loads an artifact directory and replays its plan on wgpu.
//!
//! **Architecture Invariant:** this crate depends on no compiler code; `wgslc-artifact` is its only contract.
//! Everything is built once in [`Session::load`] (buffers, weights, shader modules, pipelines, bind groups and
//! read-back buffers); [`Session::run`] only writes inputs, encodes one compute pass with every dispatch,
//! submits once and reads the outputs back. It allocates no GPU memory.
//!
//! Threading: a [`Session`] is `Send + Sync`; runs on one session are serialized by a mutex (they share the
//! plan's buffers), so concurrent callers get the same results as sequential ones. Sessions that share one
//! [`Gpu`] run independently.

mod generate;

pub use generate::{GenerateOptions, Generation, Sampling};
use std::path::Path;
use std::sync::{Arc, Mutex};
/// The wgpu this runtime is built on, for code that uses [`Gpu`]'s device and queue.
pub use wgpu;
use wgslc_artifact::{relayout, ArtifactError, BufferKind, DeviceLimits, Plan, Ranges, RunLayout, StorageType};
use wgslc_artifact::{subgroups_usable, submit_ranges, TensorSpec};
pub use wgslc_artifact::{HostTensor, TensorData};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error("no GPU adapter found: {0} (on Linux without a GPU, install Mesa's lavapipe: mesa-vulkan-drivers)")]
    NoAdapter(String),
    #[error("the GPU refused the device: {0}")]
    Device(String),
    #[error("artifact: {0}")]
    Invalid(String),
    #[error("the device cannot run this artifact: {0}")]
    Limits(String),
    #[error("input '{name}': {reason}")]
    Input { name: String, reason: String },
    #[error("GPU error: {0}")]
    Gpu(String),
}

/// A device and queue, shareable between sessions.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// What wgpu adds to the kernels of artifacts loaded on this device.
    pub shader_checks: ShaderChecks,
    /// Whether kernels' subgroup modules replay here (asked for, and `wgslc_artifact::subgroups_usable`).
    pub subgroups: bool,
    lost: Arc<Mutex<Option<String>>>,
}

/// GPU timestamps inside a compute pass: asked for where the adapter has them, for tools that time kernels
/// (`wgslc::profile`, behind the CLI's `bench --profile`).
pub const TIMING: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// What wgpu adds to an artifact's kernels, as to any untrusted shader: a clamp on every workgroup/private array
/// index and a counter in every loop. wgslc's kernels need neither (arrays sized for the indices emitted, loops
/// bounded by constants or checked dims), and on an H200 they cost a 4096³ product 16 % (docs/performance.md).
/// Buffer accesses stay bounded by the driver's robust buffer access either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShaderChecks {
    /// As compiled (the default): for artifacts wgslc compiled, which are code as a native library is.
    #[default]
    Trusted,
    /// wgpu's checks: for an artifact from elsewhere.
    Checked,
}

impl Gpu {
    /// Opens the first high-performance adapter (respecting `WGPU_BACKEND`), with its real limits and no checks.
    pub fn new() -> Result<Arc<Gpu>, RuntimeError> {
        Gpu::with_shader_checks(ShaderChecks::default())
    }

    /// [`Gpu::new`], with the given checks on every kernel loaded on it.
    pub fn with_shader_checks(shader_checks: ShaderChecks) -> Result<Arc<Gpu>, RuntimeError> {
        Gpu::with_options(shader_checks, true)
    }

    /// [`Gpu::with_shader_checks`]; `subgroups: false` keeps kernels off their subgroup modules everywhere.
    pub fn with_options(shader_checks: ShaderChecks, subgroups: bool) -> Result<Arc<Gpu>, RuntimeError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        // Read here: wgpu-types' own `from_env` reads nothing unless its "std" feature is on.
        desc.backends = std::env::var("WGPU_BACKEND")
            .map(|b| wgpu::Backends::from_comma_list(&b))
            .unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(desc);
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| RuntimeError::NoAdapter(e.to_string()))?;
        let info = adapter.get_info();
        let has = adapter.features().contains(wgpu::Features::SUBGROUP);
        let subgroups = subgroups && subgroups_usable(has, info.subgroup_min_size, info.subgroup_max_size);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("wgslc"),
            required_features: adapter.features() & (TIMING | wgpu::Features::SUBGROUP),
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| RuntimeError::Device(e.to_string()))?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            *flag.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{reason:?}: {msg}"));
        });
        Ok(Arc::new(Gpu { device, queue, info, shader_checks, subgroups, lost }))
    }

    /// "name (backend, driver)": which adapter runs the kernels, and ", subgroups" where they replay subgroup modules.
    pub fn describe(&self) -> String {
        let (i, sg) = (&self.info, if self.subgroups { ", subgroups" } else { "" });
        format!("{} ({:?}, {} {}{sg})", i.name, i.backend, i.driver, i.driver_info)
    }

    /// An error if the device has been lost since it was opened.
    pub fn check_lost(&self) -> Result<(), RuntimeError> {
        match &*self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(m) => Err(RuntimeError::Gpu(format!("device lost: {m}"))),
            None => Ok(()),
        }
    }

    /// Maps `bufs` for reading and waits until every one is mapped (or the device is lost).
    pub fn map_read(&self, bufs: &[&wgpu::Buffer]) -> Result<(), RuntimeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        for b in bufs {
            let tx = tx.clone();
            b.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        }
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| RuntimeError::Gpu(e.to_string()))?;
        self.check_lost()?;
        for _ in bufs {
            let r = rx.recv().map_err(|e| RuntimeError::Gpu(e.to_string()))?;
            r.map_err(|e| RuntimeError::Gpu(format!("read-back failed: {e}")))?;
        }
        Ok(())
    }

    /// Runs `f` inside validation and out-of-memory error scopes and reports what they caught (wgpu's "std" feature
    /// keeps each thread's scopes its own, so threads may run scoped sections at once).
    pub fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T, RuntimeError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = v.or(o) {
            return Err(RuntimeError::Gpu(format!("{what}: {e}")));
        }
        Ok(r)
    }
}

/// A loaded artifact, ready to run.
pub struct Session {
    gpu: Arc<Gpu>,
    plan: Plan,
    buffers: Vec<wgpu::Buffer>,
    pipelines: Vec<wgpu::ComputePipeline>,
    bind_groups: Vec<wgpu::BindGroup>,
    readback: Vec<wgpu::Buffer>,
    run_lock: Mutex<()>,
    /// What `run`, `time_replay` and `encode_dispatches` replay.
    replay: Mutex<Replay>,
}

/// A replay's dispatches (the plan's, a decoder step's or the last run's bucket's) and its ranged dims' values (the
/// last run's, their max before any: what the dims buffer holds and replays dispatch at).
struct Replay {
    dispatches: Vec<usize>,
    values: Vec<usize>,
    layout: RunLayout,
}

impl Session {
    /// Loads an artifact on a new device.
    pub fn load(dir: &Path) -> Result<Session, RuntimeError> {
        Session::load_with(dir, Gpu::new()?)
    }

    /// Loads an artifact on an existing device. Every check happens before any GPU work.
    pub fn load_with(dir: &Path, gpu: Arc<Gpu>) -> Result<Session, RuntimeError> {
        let plan = Plan::read(dir)?;
        check_limits(&plan, &gpu)?;
        let read = |k: &wgslc_artifact::Kernel| {
            let path = k.module(gpu.subgroups);
            std::fs::read_to_string(dir.join(path))
                .map_err(|e| RuntimeError::Invalid(format!("kernel '{}': cannot read '{path}': {e}", k.name)))
        };
        let sources = plan.kernels.iter().map(read).collect::<Result<Vec<_>, _>>()?;
        // Weights: memory-mapped, copied straight into buffers mapped at creation (one host copy: the map).
        let wpath = dir.join("weights.safetensors");
        let file = std::fs::File::open(&wpath)
            .map_err(|e| RuntimeError::Invalid(format!("cannot open weights.safetensors: {e}")))?;
        // SAFETY: the file is opened read-only and only read while mapped; a concurrent writer would be a misuse
        // of the artifact directory that at worst yields wrong weights, which the size checks below bound.
        let mmap = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| RuntimeError::Invalid(format!("cannot map weights: {e}")))?;
        Session::build(plan, sources, &mmap, gpu)
    }

    /// Loads an artifact from memory: plan.json's text, each kernel's WGSL by its path in the plan
    /// (`kernels/…`), and weights.safetensors' bytes (e.g. all `include_bytes!`'d into a binary, or fetched).
    pub fn from_parts(
        plan_json: &str,
        kernels: &[(&str, &str)],
        weights: &[u8],
        gpu: Arc<Gpu>,
    ) -> Result<Session, RuntimeError> {
        let plan = Plan::parse(plan_json)?;
        check_limits(&plan, &gpu)?;
        let sources =
            plan.kernels
                .iter()
                .map(|k| {
                    let path = k.module(gpu.subgroups);
                    kernels.iter().find(|(p, _)| *p == path).map(|(_, s)| s.to_string()).ok_or_else(|| {
                        RuntimeError::Invalid(format!("kernel '{}': no source given for '{path}'", k.name))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
        Session::build(plan, sources, weights, gpu)
    }

    /// Everything after reading: weights into buffers, modules, pipelines, bind groups, read-back buffers.
    fn build(plan: Plan, sources: Vec<String>, weight_bytes: &[u8], gpu: Arc<Gpu>) -> Result<Session, RuntimeError> {
        let weights = safetensors::SafeTensors::deserialize(weight_bytes)
            .map_err(|e| RuntimeError::Invalid(format!("weights.safetensors: {e}")))?;

        // Every tensor the plan names must be in the file with the plan's dtype and shape, before any GPU work.
        let mut tensors = Vec::with_capacity(plan.weights.len());
        for w in &plan.weights {
            let t = weights.tensor(&w.name).map_err(|e| RuntimeError::Invalid(format!("weight '{}': {e}", w.name)))?;
            let dtype = match w.storage {
                StorageType::F32 => safetensors::Dtype::F32,
                StorageType::I32 => safetensors::Dtype::I32,
                StorageType::U32 => safetensors::Dtype::U32,
            };
            if t.dtype() != dtype || t.shape() != w.shape.as_slice() {
                return Err(RuntimeError::Invalid(format!(
                    "weight '{}' is {:?} {:?} in weights.safetensors, the plan expects {:?} {:?}",
                    w.name,
                    t.dtype(),
                    t.shape(),
                    dtype,
                    w.shape
                )));
            }
            tensors.push(t);
        }

        let dev = &gpu.device;
        let mut buffers = Vec::with_capacity(plan.buffers.len());
        for (i, b) in plan.buffers.iter().enumerate() {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
            let buf = if b.kind == BufferKind::Weight {
                gpu.scoped(&format!("creating weight buffer '{}'", b.name), || {
                    let buf = dev.create_buffer(&wgpu::BufferDescriptor {
                        label: Some(&b.name),
                        size: b.size,
                        usage,
                        mapped_at_creation: true,
                    });
                    // Plan::check put every weight inside its buffer; the dtype and shape checks fixed its length.
                    let copied = buf.slice(..).get_mapped_range_mut().map(|mut m| {
                        for (w, t) in plan.weights.iter().zip(&tensors).filter(|(w, _)| w.buffer == i) {
                            let data = t.data();
                            let at = w.offset as usize;
                            m.slice(at..at + data.len()).copy_from_slice(data);
                        }
                    });
                    buf.unmap();
                    copied.map(|_| buf)
                })?
                .map_err(|e| RuntimeError::Gpu(format!("mapping weight buffer '{}': {e}", b.name)))?
            } else {
                gpu.scoped(&format!("creating buffer '{}'", b.name), || {
                    dev.create_buffer(&wgpu::BufferDescriptor {
                        label: Some(&b.name),
                        size: b.size,
                        usage,
                        mapped_at_creation: false,
                    })
                })?
            };
            buffers.push(buf);
        }
        drop(tensors);
        drop(weights);

        // Compiled on every core (error scopes are per thread): an artifact in buckets has hundreds of kernels.
        let checks = match gpu.shader_checks {
            ShaderChecks::Trusted => wgpu::ShaderRuntimeChecks::unchecked(),
            ShaderChecks::Checked => wgpu::ShaderRuntimeChecks::checked(),
        };
        let make = |(k, src): (&wgslc_artifact::Kernel, &String)| {
            gpu.scoped(&format!("kernel '{}'", k.name), || {
                let source = wgpu::ShaderSource::Wgsl(wgslc_artifact::for_naga(src));
                let desc = wgpu::ShaderModuleDescriptor { label: Some(&k.name), source };
                // SAFETY: unchecked only when the Gpu says the artifact is wgslc's, whose kernels index arrays
                // within their sizes and whose loops end (see `ShaderChecks`).
                let module = unsafe { dev.create_shader_module_trusted(desc, checks) };
                let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&k.name),
                    layout: None,
                    module: &module,
                    entry_point: Some(&k.entry_point),
                    compilation_options: Default::default(),
                    cache: None,
                });
                let layout = pipeline.get_bind_group_layout(0);
                let entries: Vec<wgpu::BindGroupEntry> = k
                    .bindings
                    .iter()
                    .map(|b| wgpu::BindGroupEntry {
                        binding: b.binding,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &buffers[b.buffer],
                            offset: b.offset,
                            size: std::num::NonZeroU64::new(b.size),
                        }),
                    })
                    .collect();
                let bg = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(&k.name),
                    layout: &layout,
                    entries: &entries,
                });
                (pipeline, bg)
            })
        };
        let (kernels, sources, make) = (&plan.kernels, &sources, &make);
        let per = kernels.len().div_ceil(std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
        let made: Vec<Result<Vec<_>, RuntimeError>> = std::thread::scope(|s| {
            let part = |c: usize| move || kernels.iter().zip(sources).skip(c * per).take(per).map(make).collect();
            let jobs: Vec<_> = (0..kernels.len().div_ceil(per)).map(|c| s.spawn(part(c))).collect();
            jobs.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        });
        let made: Vec<Vec<_>> = made.into_iter().collect::<Result<_, _>>()?;
        let (pipelines, bind_groups): (Vec<_>, Vec<_>) = made.into_iter().flatten().unzip();

        let readback = plan
            .outputs
            .iter()
            .map(|o| {
                gpu.scoped(&format!("creating read-back buffer for '{}'", o.name), || {
                    dev.create_buffer(&wgpu::BufferDescriptor {
                        label: Some(&o.name),
                        size: plan.buffers[o.buffer].size,
                        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Ranged dims start at their max, so a replay without inputs (bench, profile) runs the largest shape.
        let max: Vec<usize> = plan.ranges.iter().flat_map(|r| r.dims.iter().map(|d| d.max)).collect();
        let layout = plan.ranges.as_ref().map_or(RunLayout { bucket: None, at: vec![] }, |r| r.layout(&max));
        plan.ranges.iter().for_each(|r| gpu.queue.write_buffer(&buffers[r.buffer], 0, &Ranges::dim_words(&max)));
        gpu.check_lost()?;
        let replay = Mutex::new(Replay { dispatches: plan.dispatches.clone(), values: max, layout });
        Ok(Session { gpu, plan, buffers, pipelines, bind_groups, readback, run_lock: Mutex::new(()), replay })
    }

    pub fn inputs(&self) -> &[TensorSpec] {
        &self.plan.inputs
    }

    pub fn outputs(&self) -> &[TensorSpec] {
        &self.plan.outputs
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Dispatches per replay.
    pub fn replayed(&self) -> usize {
        self.replay.lock().unwrap_or_else(|p| p.into_inner()).dispatches.len()
    }

    /// Makes `run`, `time_replay` and `encode_dispatches` replay only one step of a decoder artifact (`decode` or
    /// `prefill`), e.g. to time a decode step; `run` still takes and returns every input and output.
    pub fn replay_step(&mut self, name: &str) -> Result<(), RuntimeError> {
        let d = self.plan.decoder.as_ref().ok_or_else(|| {
            RuntimeError::Invalid("this artifact has no decoder section: compile the model with --kv-cache".into())
        })?;
        let step = d.steps.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = d.steps.iter().map(|s| s.name.as_str()).collect();
            RuntimeError::Invalid(format!("no step '{name}' (steps: {})", names.join(", ")))
        })?;
        self.replay.get_mut().unwrap_or_else(|p| p.into_inner()).dispatches = step.dispatches.clone();
        Ok(())
    }

    /// Runs the plan once: inputs in graph-input order, outputs in graph-output order. An artifact with ranged
    /// dims takes inputs of any shape its ranges allow and returns outputs of the matching shapes.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, RuntimeError> {
        if inputs.len() != self.plan.inputs.len() {
            return Err(RuntimeError::Invalid(format!(
                "the model takes {} inputs, {} were given",
                self.plan.inputs.len(),
                inputs.len()
            )));
        }
        let values = self.plan.ranges.as_ref().map(|r| r.dim_values(&self.plan.inputs, inputs)).transpose()?;
        // Each ranged tensor laid out at the dims' max, or at its bucket's.
        let layout = self.plan.ranges.as_ref().zip(values.as_ref()).map(|(r, vals)| r.layout(vals));
        let _guard = self.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let gpu = &self.gpu;
        for (spec, t) in self.plan.inputs.iter().zip(inputs) {
            let bytes = match (&values, &layout) {
                (Some(vals), Some(l)) => {
                    let actual = spec.at_values(vals);
                    relayout(&actual.input_bytes(t)?, &actual.shape, &spec.at_values(&l.at).shape, true)
                }
                _ => spec.input_bytes(t)?,
            };
            gpu.queue.write_buffer(&self.buffers[spec.buffer], 0, &bytes);
        }
        if let (Some(r), Some(vals), Some(l)) = (&self.plan.ranges, &values, &layout) {
            gpu.queue.write_buffer(&self.buffers[r.buffer], 0, &Ranges::dim_words(vals));
            let mut replay = self.replay.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(b) = l.bucket {
                replay.dispatches = r.buckets[b].dispatches.clone();
            }
            (replay.values, replay.layout) = (vals.clone(), l.clone());
        }
        gpu.scoped("replay", || {
            self.submit_replay(|enc| {
                for (o, rb) in self.plan.outputs.iter().zip(&self.readback) {
                    enc.copy_buffer_to_buffer(&self.buffers[o.buffer], 0, rb, 0, rb.size());
                }
            })
        })?;
        gpu.map_read(&self.readback.iter().collect::<Vec<_>>())?;
        let mut outs = Vec::with_capacity(self.readback.len());
        for (spec, rb) in self.plan.outputs.iter().zip(&self.readback) {
            let laid = layout.as_ref().map_or_else(|| spec.clone(), |l| spec.at_values(&l.at));
            let n: usize = laid.shape.iter().product();
            let actual = values.as_ref().map(|vals| spec.at_values(vals));
            let t = rb
                .slice(..)
                .get_mapped_range()
                .map(|view| match &actual {
                    Some(a) => a.output_tensor(&relayout(&view[..n * 4], &a.shape, &laid.shape, false)),
                    None => spec.output_tensor(&view[..n * 4]),
                })
                .map_err(|e| RuntimeError::Gpu(format!("reading output '{}': {e}", spec.name)));
            rb.unmap();
            outs.push(t?);
        }
        Ok(outs)
    }

    /// Submits the replay in the submits of [`submit_ranges`] (a pass each), so the GPU runs the first kernels
    /// while the rest are encoded; `last` adds commands to the last submit.
    fn submit_replay(&self, mut last: impl FnMut(&mut wgpu::CommandEncoder)) {
        let ranges = submit_ranges(self.replayed().max(1));
        let n = ranges.len();
        for (i, r) in ranges.into_iter().enumerate() {
            let mut enc = self.gpu.device.create_command_encoder(&Default::default());
            self.encode_dispatches(&mut enc.begin_compute_pass(&Default::default()), r, |_, _| {});
            (i + 1 == n).then(|| last(&mut enc));
            self.gpu.queue.submit([enc.finish()]);
        }
    }

    /// Encodes the replay's dispatches `range` (ranged dims at the last run's values) into `pass`, calling
    /// `before(pass, i)` before dispatch `i`: also for tools that time kernels (`wgslc::profile`), whose submits
    /// are not serialized with runs.
    pub fn encode_dispatches(
        &self,
        pass: &mut wgpu::ComputePass,
        range: std::ops::Range<usize>,
        mut before: impl FnMut(&mut wgpu::ComputePass, usize),
    ) {
        let replay = self.replay.lock().unwrap_or_else(|p| p.into_inner());
        let ranged = self.plan.ranges.as_ref().map(|_| (replay.values.as_slice(), &replay.layout));
        for (i, &d) in replay.dispatches.get(range.clone()).unwrap_or_default().iter().enumerate() {
            before(pass, range.start + i);
            self.dispatch(pass, d, ranged);
        }
    }

    /// The kernel of each of the replay's dispatches, by name, in order.
    pub fn dispatch_names(&self) -> Vec<String> {
        let replay = self.replay.lock().unwrap_or_else(|p| p.into_inner());
        replay.dispatches.iter().map(|&d| self.plan.kernels[d].name.clone()).collect()
    }

    /// Kernel `d` into an open compute pass. At ranged dims' values, a kernel that scales with a dim dispatches
    /// `ceil(W · n / max)` workgroups along its axis (`max`: the dim's, or its bucket's).
    fn dispatch(&self, pass: &mut wgpu::ComputePass, d: usize, ranged: Option<(&[usize], &RunLayout)>) {
        let k = &self.plan.kernels[d];
        let w = ranged.map_or(k.workgroups, |(values, layout)| layout.workgroups(k, values));
        pass.set_pipeline(&self.pipelines[d]);
        pass.set_bind_group(0, &self.bind_groups[d], &[]);
        pass.dispatch_workgroups(w[0], w[1], w[2]);
    }

    /// Replays the plan `iterations` times without reading outputs back (inputs stay as last written) and
    /// returns the wall time per iteration in seconds, measured to queue completion. For benchmarks.
    pub fn time_replay(&self, iterations: usize) -> Result<f64, RuntimeError> {
        let _guard = self.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let gpu = &self.gpu;
        let start = std::time::Instant::now();
        for _ in 0..iterations {
            self.submit_replay(|_| {});
            gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| RuntimeError::Gpu(e.to_string()))?;
        }
        gpu.check_lost()?;
        Ok(start.elapsed().as_secs_f64() / iterations.max(1) as f64)
    }
}

/// The plan against the device's real limits, before any GPU work.
fn check_limits(plan: &Plan, gpu: &Gpu) -> Result<(), RuntimeError> {
    let l = gpu.device.limits();
    plan.fits(&DeviceLimits {
        max_buffer_size: l.max_buffer_size,
        max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
    })
    .map_err(RuntimeError::Limits)
}
