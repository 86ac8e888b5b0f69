//! Invariants of the code's shape that docs/architecture.md states, checked on the sources: the runtimes depend on
//! no compiler code, the passes do no I/O, wgslc.js imports nothing, no Rust file of the compiler or the passes
//! grows past the size a reader can hold, and the document itself stays a short list of invariants that tests hold.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The names in a Cargo.toml's `[dependencies]` table.
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut deps = Vec::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
        } else if inside && !line.is_empty() && !line.starts_with('#') {
            deps.push(line.split(['=', '.', ' ']).next().unwrap().to_string());
        }
    }
    deps
}

/// The runtimes depend on no compiler code: the versioned artifact is the only contract.
#[test]
fn runtimes_depend_on_no_compiler_crate() {
    let compiler = ["wgslc-ir", "wgslc-passes", "wgslc-emit", "wgslc-onnx", "wgslc-pt2", "wgslc-driver"];
    for manifest in ["runtime/Cargo.toml", "runtime/artifact/Cargo.toml"] {
        let deps = dependencies(&root().join(manifest));
        assert!(deps.iter().any(|d| d.starts_with("wgslc-") || d == "serde"), "{manifest}: read no dependencies");
        for d in &deps {
            assert!(!compiler.contains(&d.as_str()), "{manifest} depends on compiler crate {d}");
        }
    }
}

/// Passes do no I/O: they take a graph and return one, with side tables; files, printing and the environment are
/// the driver's and the CLI's.
#[test]
fn passes_do_no_io() {
    let mut found = Vec::new();
    for dir in ["passes/src", "passes/ir/src"] {
        for file in rust_files(&root().join(dir)) {
            if file.components().any(|c| c.as_os_str() == "tests") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap();
                let io = ["std::fs", "std::io", "std::env", "File::", "println!", "eprintln!", "print!("];
                if let Some(what) = io.iter().find(|w| code.contains(*w)) {
                    found.push(format!("{}:{}: {what}", file.display(), i + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "I/O in the passes:\n{}", found.join("\n"));
}

/// The web runtime is two ES modules with no dependencies and no build step: artifact.js (the plan's contract on
/// the host, as wgslc-artifact is the Rust runtime's) imports nothing, and wgslc.js imports only artifact.js.
#[test]
fn wgslc_js_imports_nothing_but_its_artifact_module() {
    for (file, allowed) in [("artifact.js", None), ("wgslc.js", Some("\"./artifact.js\";"))] {
        let js = std::fs::read_to_string(root().join("runtime/web").join(file)).unwrap();
        for (i, line) in js.lines().enumerate() {
            let l = line.trim_start();
            let imports = l.starts_with("import ") || l.starts_with("import(") || l.contains("require(");
            let from = l.starts_with("export ") && l.contains(" from ");
            if imports || from {
                let ok = allowed.is_some_and(|a| l.ends_with(&format!("from {a}")));
                assert!(ok, "{file}:{}: {line}", i + 1);
            }
        }
    }
}

/// The JavaScript runtime stays under 800 lines, as the Rust runtime stays under 1,000: what a plan means on the
/// host (its checks, the decoder program's values, input and output words, ranged dims) lives in artifact.js.
#[test]
fn the_web_runtime_stays_small() {
    let lines = std::fs::read_to_string(root().join("runtime/web/wgslc.js")).unwrap().lines().count();
    assert!(lines < 800, "runtime/web/wgslc.js is {lines} lines (issue 32's bound: under 800)");
}

/// No Rust file of the compiler or the passes is over 800 lines (issue 32's bound: a file a reader can hold).
#[test]
fn compiler_files_stay_readable() {
    let mut long = Vec::new();
    for dir in ["compiler", "passes"] {
        for file in rust_files(&root().join(dir)) {
            let lines = std::fs::read_to_string(&file).unwrap().lines().count();
            if lines > 800 {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these by topic:\n{}", long.join("\n"));
}

/// The Rust runtime, what every user ships, stays under 1,000 lines: what a plan means on the host without a GPU
/// (input and output bytes, ranged dims) lives with the schema in wgslc-artifact, benchmark tools in the CLI.
#[test]
fn the_rust_runtime_stays_small() {
    let lines: usize = rust_files(&root().join("runtime/src"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum();
    assert!(lines < 1000, "runtime/src is {lines} lines of Rust (issue 32's bound: under 1,000)");
}

/// The decode protocol lives in the compiler: both runtimes' generation code interprets the decoder's program and
/// reads none of the loop inputs whose meaning the cache layout decides (the mask, positions, cache positions, the
/// chunk's last index, the present outputs), nor the cache's rows.
#[test]
fn runtimes_interpret_the_decoder_program() {
    let rust = std::fs::read_to_string(root().join("runtime/src/generate.rs")).unwrap();
    let js = std::fs::read_to_string(root().join("runtime/web/wgslc.js")).unwrap();
    let (from, to) =
        (js.find("async #generate(").unwrap(), js.find("// Kernels in order, into an open compute pass.").unwrap());
    for (file, code) in [("runtime/src/generate.rs", &rust[..]), ("wgslc.js's Session.generate", &js[from..to])] {
        for field in ["attention_mask", "position_ids", "cache_position", "last_index", "present", "first_row", "rows"]
        {
            assert!(!code.contains(field), "{file} reads the decoder step's '{field}': the program should say it");
        }
    }
}

/// docs/architecture.md is a short text of invariants: each row of its table names at least one test (or check)
/// that exists as a function in the sources, so no invariant is claimed without what holds it; the design behind
/// them lives in docs/design/.
#[test]
fn architecture_doc_names_only_invariants_that_tests_hold() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    assert!(
        doc.lines().count() <= 200,
        "docs/architecture.md has {} lines: move design into docs/design/",
        doc.lines().count()
    );
    let mut sources = String::new();
    for dir in ["cli", "compiler", "passes", "runtime"] {
        for file in rust_files(&root().join(dir)) {
            sources.push_str(&std::fs::read_to_string(file).unwrap());
        }
    }
    let table = doc.split("## Invariants and the tests that check them").nth(1).expect("the invariants section");
    let table = table.split("\n## ").next().unwrap();
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| invariant") && !l.starts_with("| ---"))
        .collect();
    assert!(rows.len() >= 15, "only {} invariants", rows.len());
    for row in rows {
        let checked_by = row.trim_end_matches('|').rsplit('|').next().unwrap();
        let names: Vec<&str> = checked_by.split('`').skip(1).step_by(2).collect();
        assert!(
            names.iter().any(|n| sources.contains(&format!("fn {n}("))),
            "docs/architecture.md: no function in the sources holds \"{row}\""
        );
    }
}
