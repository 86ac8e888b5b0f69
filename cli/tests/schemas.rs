//! docs/plan.schema.json and docs/report.schema.json are the JSON Schemas of the artifact's plan.json and of
//! report.json, generated from the serde types the compiler writes and the runtimes read. This test fails when a
//! type changed and the committed schema did not; `WGSLC_UPDATE_SCHEMAS=1 cargo test --test schemas` rewrites
//! them. It also checks that a compiled artifact's files are instances of their schemas' top-level shape.

use std::path::Path;

fn check(file: &str, schema: schemars::Schema) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs").join(file);
    let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    if std::env::var_os("WGSLC_UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} is not the schema of the current types: run WGSLC_UPDATE_SCHEMAS=1 cargo test --test schemas",
        path.display()
    );
}

#[test]
fn committed_schemas_are_current() {
    check("plan.schema.json", schemars::schema_for!(wgslc::artifact::Plan));
    check("report.schema.json", schemars::schema_for!(wgslc_emit::report::Report));
}

/// Every key of a compiled plan.json and report.json is a property of its schema (the types deny unknown fields,
/// so this also guards the schema against describing fewer than the files hold).
#[test]
fn compiled_files_use_only_schema_properties() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/decoders/qwen2_dynamo20/model.onnx");
    let opts = wgslc::CompileOptions {
        kv_cache: Some(wgslc::KvCache { capacity: 8, chunk: 2, state: vec![], fixed: Default::default() }),
        ..Default::default()
    };
    wgslc::compile(&model, tmp.path(), &opts).unwrap();
    for (file, schema) in [
        ("plan.json", schemars::schema_for!(wgslc::artifact::Plan)),
        ("report.json", schemars::schema_for!(wgslc_emit::report::Report)),
    ] {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(tmp.path().join(file)).unwrap()).unwrap();
        let props = schema.as_value()["properties"].as_object().unwrap().clone();
        for key in doc.as_object().unwrap().keys() {
            assert!(props.contains_key(key), "{file}: '{key}' is not in its schema");
        }
    }
}
