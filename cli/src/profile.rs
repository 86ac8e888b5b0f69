//! Per-kernel GPU times of a session's replay: what `wgslc bench --profile` and `bench --decode` print. A
//! benchmark's tool, not the runtime's: it encodes the replay through `Session::encode_dispatches` and uses only
//! `Gpu`'s public device and queue.

use wgslc_runtime::{wgpu, RuntimeError, Session, TIMING};

/// Per-kernel GPU times from [`profile`].
#[derive(Clone, Debug)]
pub struct Profile {
    /// `true`: GPU timestamps between the dispatches of one pass (they add up to the replay); `false`: each
    /// dispatch in a submit of its own, per-submit overhead included.
    pub timestamps: bool,
    /// (kernel name, milliseconds) in dispatch order.
    pub kernels: Vec<(String, f64)>,
}

/// Milliseconds per dispatch (kernel name, median over `iterations` replays) in dispatch order, and how they were
/// measured. With timestamp queries (most native adapters), a timestamp is written before every dispatch of the
/// usual one-pass replay and after the last, so each kernel's time is the GPU time from its start to the next
/// one's and the times add up to the replay's GPU time. Without them, each dispatch runs in a pass and submit of
/// its own, waited for, which adds the per-submit overhead to every kernel (also for plans of more dispatches than
/// one query set holds).
pub fn profile(session: &Session, iterations: usize) -> Result<Profile, RuntimeError> {
    let names = session.dispatch_names();
    let gpu = session.gpu();
    let queries = names.len() + 1;
    if gpu.device.features().contains(TIMING) && queries > 1 && queries <= wgpu::QUERY_SET_MAX_QUERIES as usize {
        return profile_timestamps(session, iterations, names);
    }
    let mut kernels = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        let start = std::time::Instant::now();
        for _ in 0..iterations.max(1) {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            session.encode_dispatches(&mut enc.begin_compute_pass(&Default::default()), i..i + 1, |_, _| {});
            gpu.queue.submit([enc.finish()]);
            gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| RuntimeError::Gpu(e.to_string()))?;
        }
        kernels.push((name, start.elapsed().as_secs_f64() * 1e3 / iterations.max(1) as f64));
    }
    gpu.check_lost()?;
    Ok(Profile { timestamps: false, kernels })
}

fn profile_timestamps(session: &Session, iterations: usize, names: Vec<String>) -> Result<Profile, RuntimeError> {
    let gpu = session.gpu();
    let n = names.len();
    let count = n as u32 + 1;
    let bytes = u64::from(count) * wgpu::QUERY_SIZE as u64;
    let (queries, resolve, read) = gpu.scoped("profile setup", || {
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgslc profile"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let buffer = |usage| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolve = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let read = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        (queries, resolve, read)
    })?;
    let period_ms = f64::from(gpu.queue.get_timestamp_period()) * 1e-6;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n];
    for _ in 0..iterations.max(1) {
        gpu.scoped("profile", || {
            let mut enc =
                gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("wgslc profile") });
            // One pass, a timestamp before each dispatch (index i before dispatch i) and after the last.
            let mut pass =
                enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("wgslc"), timestamp_writes: None });
            session.encode_dispatches(&mut pass, 0..n, |pass, i| pass.write_timestamp(&queries, i as u32));
            pass.write_timestamp(&queries, n as u32);
            drop(pass);
            enc.resolve_query_set(&queries, 0..count, &resolve, 0);
            enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
            gpu.queue.submit([enc.finish()]);
        })?;
        gpu.map_read(&[&read])?;
        let ticks: Vec<u64> = read
            .slice(..)
            .get_mapped_range()
            .map(|view| view.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
            .map_err(|e| RuntimeError::Gpu(format!("reading timestamps: {e}")))?;
        read.unmap();
        for (i, s) in samples.iter_mut().enumerate() {
            s.push(ticks[i + 1].saturating_sub(ticks[i]) as f64 * period_ms);
        }
    }
    let kernels = names
        .into_iter()
        .zip(samples)
        .map(|(name, mut s)| {
            s.sort_by(f64::total_cmp);
            (name, s[s.len() / 2])
        })
        .collect();
    Ok(Profile { timestamps: true, kernels })
}
