//! The device's memory bandwidth as a copy kernel measures it: the yardstick `wgslc bench --decode` states a
//! decode step's bandwidth floor with. A benchmark's tool, not the runtime's: it uses only `Gpu`'s public device
//! and queue.

use wgslc_runtime::{wgpu, Gpu, RuntimeError};

/// GB/s (bytes read plus bytes written): 128 MiB copied by a compute shader in vec4s, `iterations` dispatches in
/// one pass, after one untimed. (A buffer-to-buffer copy command is no yardstick: on an H100 over Vulkan it moves
/// 0.8 TB/s where kernels read 2+ TB/s.)
pub fn copy_bandwidth(gpu: &Gpu, iterations: usize) -> Result<f64, RuntimeError> {
    const BYTES: u64 = 128 << 20;
    const SRC: &str = "@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;\n\
        @group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;\n\
        @compute @workgroup_size(256)\n\
        fn main(@builtin(global_invocation_id) id: vec3<u32>) { dst[id.x] = src[id.x]; }\n";
    let dev = &gpu.device;
    let (pipeline, group) = gpu.scoped("copy bandwidth", || {
        let usage = wgpu::BufferUsages::STORAGE;
        let buf =
            |label| dev.create_buffer(&wgpu::BufferDescriptor { label, size: BYTES, usage, mapped_at_creation: false });
        let (src, dst) = (buf(Some("wgslc copy source")), buf(Some("wgslc copy destination")));
        let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("wgslc copy"),
            source: wgpu::ShaderSource::Wgsl(SRC.into()),
        });
        let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("wgslc copy"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let group = dev.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
            ],
        });
        (pipeline, group)
    })?;
    let copies = |n: usize| -> Result<f64, RuntimeError> {
        let start = std::time::Instant::now();
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            for _ in 0..n {
                pass.dispatch_workgroups((BYTES / 16 / 256) as u32, 1, 1);
            }
        }
        gpu.queue.submit([enc.finish()]);
        dev.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| RuntimeError::Gpu(e.to_string()))?;
        Ok(start.elapsed().as_secs_f64())
    };
    copies(1)?;
    let n = iterations.max(1);
    let secs = copies(n)?;
    gpu.check_lost()?;
    Ok(2.0 * BYTES as f64 * n as f64 / secs / 1e9)
}
