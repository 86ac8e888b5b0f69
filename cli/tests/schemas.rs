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

/// The field lists and enum values wgslc.js (its artifact.js) checks plan.json against, as JavaScript: each object
/// type of the plan schema (the plan itself as `Plan`) with its properties, and each enum with its values (a string
/// enum's strings, the keys of an enum whose variants hold data).
fn js_tables(schema: &serde_json::Value) -> String {
    use std::collections::BTreeMap;
    let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut enums: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    fields.insert("Plan".into(), keys(&schema["properties"]));
    for (name, def) in schema["$defs"].as_object().unwrap() {
        if let Some(p) = def.get("properties") {
            fields.insert(name.clone(), keys(p));
        } else if let Some(e) = def.get("enum") {
            enums.insert(name.clone(), e.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect());
        } else if let Some(alts) = def.get("oneOf") {
            // An enum of variants with data (`{"run": 1}`): each alternative an object of one required property,
            // listed like a string enum's values by its key.
            let key = |a: &serde_json::Value| match a["required"].as_array().map(|r| &r[..]) {
                Some([k]) => k.as_str().unwrap().to_string(),
                _ => panic!("plan schema type '{name}' has an alternative that is not one keyed variant"),
            };
            enums.insert(name.clone(), alts.as_array().unwrap().iter().map(key).collect());
        } else {
            panic!("plan schema type '{name}' is neither an object nor a string enum: teach js_tables it");
        }
    }
    // `  Name: ["a", "b", …],` wrapped at 120 columns.
    let table = |name: &str, rows: &BTreeMap<String, Vec<String>>| {
        let mut s = format!("const {name} = {{\n");
        for (k, vs) in rows {
            let mut line = format!("  {k}: [");
            for (i, v) in vs.iter().enumerate() {
                let item = format!("\"{v}\"{}", if i + 1 < vs.len() { ", " } else { "" });
                if line.len() + item.trim_end().len() > 118 {
                    s.push_str(line.trim_end());
                    s.push('\n');
                    line = "    ".into();
                }
                line.push_str(&item);
            }
            s.push_str(&line);
            s.push_str("],\n");
        }
        s + "};\n"
    };
    format!(
        "// Each object's fields and each enum's values, as the Rust runtime's serde types accept them.\n{}{}",
        table("FIELDS", &fields),
        table("ENUMS", &enums)
    )
}

/// wgslc.js checks plan.json (in artifact.js) against field lists and enum values generated from the plan schema
/// (so the two runtimes accept the same plans); this fails when the generated block in artifact.js is not the
/// schema's, and `WGSLC_UPDATE_SCHEMAS=1` rewrites it.
#[test]
fn wgslc_js_tables_are_the_schemas() {
    const BEGIN: &str =
        "// ---- generated from docs/plan.schema.json by cli/tests/schemas.rs (WGSLC_UPDATE_SCHEMAS=1 rewrites it) ----\n";
    const END: &str = "// ---- end of generated code ----\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/web/artifact.js");
    let js = std::fs::read_to_string(&path).unwrap();
    let (Some(b), Some(e)) = (js.find(BEGIN), js.find(END)) else { panic!("artifact.js lost its generated block") };
    let schema = serde_json::to_value(schemars::schema_for!(wgslc::artifact::Plan)).unwrap();
    let want = js_tables(&schema);
    let have = &js[b + BEGIN.len()..e];
    if std::env::var_os("WGSLC_UPDATE_SCHEMAS").is_some() && have != want {
        std::fs::write(&path, format!("{}{want}{}", &js[..b + BEGIN.len()], &js[e..])).unwrap();
        return;
    }
    assert!(
        have == want,
        "artifact.js's generated tables are stale: run WGSLC_UPDATE_SCHEMAS=1 cargo test --test schemas"
    );
}
