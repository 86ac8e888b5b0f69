//! The malformed corpus (testdata/malformed/cases.json): every model and artifact there must be refused with
//! the listed error, through the CLI, with exit code 1 and no panic.

mod common;

use std::process::Command;

#[test]
fn malformed_inputs_get_clear_errors_not_panics() {
    let dir = common::testdata().join("malformed");
    let cases: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    assert!(cases.len() >= 20);
    let tmp = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in &cases {
        let file = dir.join(case["file"].as_str().unwrap());
        let expect = case["expect"].as_str().unwrap();
        let out = tmp.path().join("out");
        let args: Vec<String> = match case["kind"].as_str().unwrap() {
            "model" => vec!["compile".into(), file.display().to_string(), "-o".into(), out.display().to_string()],
            _ => vec!["run".into(), file.display().to_string(), "-o".into(), out.display().to_string()],
        };
        let o = Command::new(env!("CARGO_BIN_EXE_wgslc")).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        let line = stderr.lines().rfind(|l| l.starts_with("wgslc: error:")).unwrap_or_default();
        if o.status.code() != Some(1) || stderr.contains("panicked") || !line.contains(expect) {
            failures.push(format!("{}: exit {:?}, expected '{expect}' in: {stderr}", case["file"], o.status.code()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
