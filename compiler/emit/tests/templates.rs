//! Templates hold no arithmetic: every number a kernel's WGSL spells out is computed by the view structs in Rust
//! (compiler/emit/src/kernels), where it is typed and where an underflow panics in tests instead of rendering a
//! wrapped number. This test reads every template and refuses `+ - * / %` inside `{{ … }}` and `{% … %}`.

use std::path::Path;

/// The expressions of `src` (the insides of `{{ }}` and `{% %}`, trim markers, string literals and range dots
/// removed) that hold an arithmetic operator, with their line numbers.
fn arithmetic(src: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = src;
    let mut offset = 0;
    while let Some(start) = rest.find(['{']) {
        let after = &rest[start..];
        let close = match after.get(..2) {
            Some("{{") => "}}",
            Some("{%") => "%}",
            _ => {
                offset += start + 1;
                rest = &rest[start + 1..];
                continue;
            }
        };
        let Some(end) = after[2..].find(close) else { break };
        let body = &after[2..2 + end];
        let line = src[..offset + start].matches('\n').count() + 1;
        let mut expr = body.trim().trim_start_matches('-').trim_end_matches('-').trim().to_string();
        // String literals (macro arguments, tuples of names) and ranges (`0..4`) are not arithmetic.
        while let Some(q) = expr.find('"') {
            match expr[q + 1..].find('"') {
                Some(e) => expr.replace_range(q..q + e + 2, ""),
                None => break,
            }
        }
        let expr = expr.replace("..", " ");
        if !expr.starts_with("include") && expr.chars().any(|c| matches!(c, '+' | '-' | '*' | '/' | '%')) {
            found.push((line, body.trim().to_string()));
        }
        offset += start + 2 + end + 2;
        rest = &after[2 + end + 2..];
    }
    found
}

#[test]
fn templates_hold_no_arithmetic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let mut bad = Vec::new();
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            read += 1;
            let src = std::fs::read_to_string(&path).unwrap();
            for (line, expr) in arithmetic(&src) {
                bad.push(format!("{}:{line}: {expr}", path.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(read > 20, "read {read} templates from {}", dir.display());
    assert!(bad.is_empty(), "arithmetic in templates (compute it in the view struct):\n{}", bad.join("\n"));
}

#[test]
fn the_check_sees_arithmetic() {
    let src = "a {{ n - 1 }}u\n{%- for u in 0..4 %}{{ u * 256 }}{% endfor %}\n{% if x % 2 == 0 %}\n{{ name }} {% call f(\"a-b\") %}";
    let found: Vec<usize> = arithmetic(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, vec![1, 2, 3]);
    assert!(arithmetic("{%- include \"header.wgsl\" %} {{ t.lanes }} {% if a != b && !c %}").is_empty());
}
