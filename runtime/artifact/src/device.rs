//! What a plan needs of a device, decided the same way by both runtimes (runtime/web/artifact.js mirrors it): the
//! limits it must fit and whether its kernels' subgroup modules may replay there.

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

#[cfg(test)]
mod tests {
    use super::*;

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
