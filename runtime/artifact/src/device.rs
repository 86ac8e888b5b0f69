//! What a plan needs of a device, decided the same way by both runtimes (runtime/web/artifact.js mirrors it): the
//! limits it must fit, whether its kernels' subgroup modules may replay there, and how a replay is split into
//! submits.

use crate::{Kernel, Plan};

/// The device limits a plan is checked against at load (WebGPU's names, wgpu's fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_buffer_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroups_per_dimension: u32,
}

/// The smallest and largest subgroups WebGPU allows a device (`subgroupMinSize`, `subgroupMaxSize`).
pub const SUBGROUP_SIZES: (u32, u32) = (4, 128);

/// Whether a device may replay kernels' subgroup modules ([`Kernel::subgroups`]): it offers WebGPU's `subgroups`
/// feature (wgpu: `Features::SUBGROUP`) with subgroups of [`SUBGROUP_SIZES`], powers of two. The compiler writes
/// subgroup modules for every size in that range: a workgroup of 256 is then whole subgroups, which the module
/// numbers its invocations by (`subgroup_id · subgroup_size + subgroup_invocation_id`) whatever order the device
/// puts them in, and a smaller one (64: the row reductions) whole subgroups or one partial one.
/// A browser also needs WGSL's `subgroup_id` builtin (wgslc.js asks `wgslLanguageFeatures`).
pub fn subgroups_usable(feature: bool, min_size: u32, max_size: u32) -> bool {
    let pow2 = |s: u32| s.is_power_of_two();
    feature
        && SUBGROUP_SIZES.0 <= min_size
        && min_size <= max_size
        && max_size <= SUBGROUP_SIZES.1
        && pow2(min_size)
        && pow2(max_size)
}

/// The directive a subgroup module starts with, as WGSL requires.
pub const ENABLE_SUBGROUPS: &str = "enable subgroups;";

/// A module as naga 30 (wgpu 30) takes it: naga implements subgroup operations but refuses their `enable`
/// directive ("not yet supported"), which WGSL and browsers require, so it is blanked out (same lines, same
/// columns for naga's messages). Any other module is returned as it is.
pub fn for_naga(wgsl: &str) -> std::borrow::Cow<'_, str> {
    match wgsl.find(ENABLE_SUBGROUPS) {
        Some(at) if wgsl[..at].lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with("//")) => {
            let mut s = wgsl.to_string();
            s.replace_range(at..at + ENABLE_SUBGROUPS.len(), &" ".repeat(ENABLE_SUBGROUPS.len()));
            s.into()
        }
        _ => wgsl.into(),
    }
}

impl Kernel {
    /// The path of the module to replay: its subgroup module where `subgroups` (see [`subgroups_usable`]) and it
    /// has one, else its WGSL.
    pub fn module(&self, subgroups: bool) -> &str {
        match &self.subgroups {
            Some(p) if subgroups => p,
            _ => &self.wgsl,
        }
    }
}

impl Plan {
    /// Whether the plan fits a device's limits; the error names the first buffer or kernel that does not.
    pub fn fits(&self, l: &DeviceLimits) -> Result<(), String> {
        if let Some(b) = self.buffers.iter().find(|b| b.size > l.max_buffer_size) {
            return Err(format!("buffer '{}' is {} bytes, the device allows {}", b.name, b.size, l.max_buffer_size));
        }
        for k in &self.kernels {
            if k.bindings.len() as u32 > l.max_storage_buffers_per_shader_stage {
                return Err(format!("kernel '{}' binds {} storage buffers", k.name, k.bindings.len()));
            }
            if let Some(b) = k.bindings.iter().find(|b| b.size > l.max_storage_buffer_binding_size) {
                return Err(format!("kernel '{}' binds {} bytes at binding {}", k.name, b.size, b.binding));
            }
            if k.workgroups.iter().any(|&w| w > l.max_compute_workgroups_per_dimension) {
                return Err(format!("kernel '{}' dispatches {:?} workgroups", k.name, k.workgroups));
            }
        }
        Ok(())
    }
}

/// Dispatches in a replay's first submit; see [`submit_ranges`].
pub const SUBMIT_FIRST: usize = 4;
/// The most dispatches in one submit of a replay; see [`submit_ranges`].
pub const SUBMIT_MAX: usize = 64;

/// How a replay of `n` dispatches is split into submits (a compute pass each, in queue order): [`SUBMIT_FIRST`]
/// dispatches, then twice as many each time up to [`SUBMIT_MAX`]. A submit's commands reach the GPU only when it
/// is submitted (WebGPU implementations record them for the driver then), so with one submit the GPU waits for the
/// whole replay to be encoded; split, it runs the first few kernels while the rest are encoded, and the replay
/// costs a few submits more (queue order keeps every kernel after the ones it reads).
pub fn submit_ranges(n: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut at, mut size) = (0, SUBMIT_FIRST);
    while at < n {
        out.push(at..(at + size).min(n));
        at += size;
        size = (2 * size).min(SUBMIT_MAX);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_split_into_growing_submits() {
        assert!(submit_ranges(0).is_empty());
        assert_eq!(submit_ranges(3), vec![0..3]);
        assert_eq!(submit_ranges(100), vec![0..4, 4..12, 12..28, 28..60, 60..100]);
        let r = submit_ranges(1000);
        assert_eq!(r[..6], [0..4, 4..12, 12..28, 28..60, 60..124, 124..188]);
        // Contiguous, covering every dispatch once, none larger than SUBMIT_MAX.
        assert!(r.windows(2).all(|w| w[0].end == w[1].start) && r.last().unwrap().end == 1000);
        assert!(r.iter().all(|x| !x.is_empty() && x.len() <= SUBMIT_MAX));
    }

    #[test]
    fn subgroup_modules_need_the_feature_and_webgpus_sizes() {
        assert!(subgroups_usable(true, 32, 32));
        assert!(subgroups_usable(true, 4, 128));
        assert!(subgroups_usable(true, 8, 64));
        assert!(!subgroups_usable(false, 32, 32));
        // Sizes outside WebGPU's, not powers of two, or unknown (wgpu reports 0 without the feature).
        assert!(!subgroups_usable(true, 2, 32));
        assert!(!subgroups_usable(true, 32, 256));
        assert!(!subgroups_usable(true, 24, 24));
        assert!(!subgroups_usable(true, 64, 32));
        assert!(!subgroups_usable(true, 0, 0));
    }

    #[test]
    fn naga_gets_subgroup_modules_without_their_directive() {
        let m = "enable subgroups;\n\nvar<private> a: u32;\n";
        assert_eq!(for_naga(m), "                 \n\nvar<private> a: u32;\n");
        let plain = "// no directive\nvar<private> a: u32; // enable subgroups; in a comment\n";
        assert_eq!(for_naga(plain), plain);
    }

    #[test]
    fn the_module_replayed_is_the_subgroup_one_only_where_usable() {
        let mut k: Kernel = serde_json::from_str(
            r#"{"name": "k", "wgsl": "kernels/k.wgsl", "entry_point": "main", "bindings": [], "workgroups": [1, 1, 1]}"#,
        )
        .unwrap();
        assert_eq!(k.module(true), "kernels/k.wgsl");
        k.subgroups = Some("kernels/k.subgroups.wgsl".into());
        assert_eq!(k.module(true), "kernels/k.subgroups.wgsl");
        assert_eq!(k.module(false), "kernels/k.wgsl");
    }
}
