//! Where an artifact is written, so that nothing a user owns is deleted or overwritten.
//!
//! A compile writes into a directory that does not exist, is empty, or holds a previous artifact (recognized by
//! its plan.json); anything else is refused unless forced. The new artifact is written beside the target first
//! (`DIR.wgslc-new-<pid>`), so a compile that fails leaves the target as it was; only then are the previous
//! artifact's own files (those its plan.json names, and report.json) removed and the new ones moved in. Other files
//! in the directory are never touched, and a new file never replaces one that is not the previous artifact's.

use crate::CompileError;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// What the target directory holds.
#[derive(Debug)]
pub(crate) struct Target {
    dir: PathBuf,
    /// The previous artifact's files, relative to `dir`.
    previous: HashSet<PathBuf>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CompileError + '_ {
    move |source| CompileError::Emit(wgslc_emit::EmitError::Io { path: path.display().to_string(), source })
}

/// The files of the artifact in `dir`, from its plan.json (any version: only the format name and the kernel
/// files, modules and subgroup modules, are read); `None` when there is no wgslc plan there. Kernel paths that would leave the directory are
/// not the artifact's.
fn artifact_files(dir: &Path) -> Option<HashSet<PathBuf>> {
    let text = std::fs::read_to_string(dir.join("plan.json")).ok()?;
    let plan: serde_json::Value = serde_json::from_str(&text).ok()?;
    if plan.get("format")?.as_str()? != "wgslc-plan" {
        return None;
    }
    let mut files: HashSet<PathBuf> =
        ["plan.json", "report.json", "weights.safetensors"].iter().map(PathBuf::from).collect();
    for k in plan.get("kernels").and_then(|k| k.as_array()).into_iter().flatten() {
        // Its WGSL, and its subgroup module where it has one.
        let modules = [k.get("wgsl").and_then(|w| w.as_str()), k.get("subgroups").and_then(|w| w.as_str())];
        for (i, m) in modules.into_iter().enumerate() {
            let path = PathBuf::from(match m {
                Some(m) => m,
                None if i == 0 => return None,
                None => continue,
            });
            if path.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
                files.insert(path);
            }
        }
    }
    Some(files)
}

/// Checks that the artifact may be written to `dir` (see the module doc).
pub(crate) fn check(dir: &Path, force: bool) -> Result<Target, CompileError> {
    let mut target = Target { dir: dir.to_path_buf(), previous: HashSet::new() };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(target),
        Err(e) => return Err(io(dir)(e)),
    };
    if entries.count() == 0 {
        return Ok(target);
    }
    match artifact_files(dir) {
        Some(files) => target.previous = files,
        None if force => {}
        None => return Err(CompileError::OutDir(dir.display().to_string())),
    }
    Ok(target)
}

impl Target {
    /// A fresh directory beside the target to write the new artifact into.
    pub(crate) fn staging(&self) -> Result<PathBuf, CompileError> {
        let name = self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        let parent = match self.dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        for i in 0.. {
            let s = parent.join(format!(".{name}.wgslc-new-{}-{i}", std::process::id()));
            match std::fs::create_dir(&s) {
                Ok(()) => return Ok(s),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(&s)(e)),
            }
        }
        unreachable!("some staging name is free")
    }

    /// Moves the artifact written in `staged` into the target, replacing the previous artifact's files only.
    pub(crate) fn install(&self, staged: &Path) -> Result<(), CompileError> {
        let mut new_files = Vec::new();
        collect_files(staged, Path::new(""), &mut new_files).map_err(io(staged))?;
        // Refuse before changing anything if a new file would replace one that is not the previous artifact's.
        for f in &new_files {
            let dst = self.dir.join(f);
            if dst.exists() && !self.previous.contains(f) {
                let _ = std::fs::remove_dir_all(staged);
                return Err(CompileError::OutDirFile(dst.display().to_string()));
            }
        }
        if !self.dir.exists() {
            return std::fs::rename(staged, &self.dir).map_err(io(&self.dir));
        }
        for f in &self.previous {
            let p = self.dir.join(f);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&p)(e)),
            }
        }
        for f in &new_files {
            let (src, dst) = (staged.join(f), self.dir.join(f));
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::rename(&src, &dst).map_err(io(&dst))?;
        }
        // The staging directory is empty now (its subdirectories too).
        std::fs::remove_dir_all(staged).map_err(io(staged))
    }
}

/// Every file under `root/rel`, relative to `root`.
fn collect_files(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(root.join(rel))? {
        let e = e?;
        let r = rel.join(e.file_name());
        if e.file_type()?.is_dir() {
            collect_files(root, &r, out)?;
        } else {
            out.push(r);
        }
    }
    Ok(())
}
