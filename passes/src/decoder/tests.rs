//! Unit tests of the decoder plan: cache pairing and the signatures it refuses.

use super::*;

fn sig(inputs: &[(&str, &[Option<usize>])], outputs: &[&str]) -> Signature {
    Signature {
        inputs: inputs.iter().map(|(n, d)| (n.to_string(), d.to_vec())).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

fn kv() -> KvCache {
    KvCache { capacity: 10, chunk: 4, state: vec![], fixed: HashSet::new() }
}

const ROLES_2D: [(&str, &[Option<usize>]); 3] =
    [("input_ids", &[None, None]), ("attention_mask", &[None, None]), ("position_ids", &[None, None])];
const CACHE: &[Option<usize>] = &[None, Some(2), None, Some(16)];

/// Named pairs, the steps' import shapes, and positional pairs where no output is named `present.N.*`.
#[test]
fn caches_pair_by_name_or_by_position() {
    let mut ins = ROLES_2D.to_vec();
    ins.push(("past_key_values.0.key", CACHE));
    let named = sig(&ins, &["logits", "present.0.key"]);
    let p = DecoderPlan::new(&named, &kv(), CacheLayout::Window).unwrap();
    assert_eq!(p.pairs, [("present.0.key".to_string(), "past_key_values.0.key".to_string())]);
    assert!(!p.positional);
    let d = p.step_shapes(StepKind::Decode);
    assert_eq!(d["past_key_values.0.key"], [1, 2, 9, 16]);
    assert_eq!(d["attention_mask"], [1, 10]);
    assert_eq!(d["input_ids"], [1, 1]);
    let f = p.step_shapes(StepKind::Prefill);
    assert_eq!((f["input_ids"].clone(), f["attention_mask"].clone()), (vec![1, 4], vec![1, 13]));
    // Every key at its position: the capacity a multiple of the chunk, the prefill step's past one chunk short.
    let p = DecoderPlan::new(&named, &kv(), CacheLayout::Positions).unwrap();
    assert_eq!(p.step_shapes(StepKind::Prefill)["past_key_values.0.key"], [1, 2, 8, 16]);

    let mut ins = ROLES_2D.to_vec();
    ins.extend([("pk0", CACHE), ("pv0", CACHE)]);
    let p = DecoderPlan::new(&sig(&ins, &["view_9", "cat_1", "cat_2"]), &kv(), CacheLayout::Window).unwrap();
    assert!(p.positional);
    assert_eq!(p.logits, "view_9");
    assert_eq!(p.pairs[1], ("cat_2".to_string(), "pv0".to_string()));
}

/// What generation can't use is refused by the input it is about.
#[test]
fn unusable_signatures_are_refused_by_input() {
    let refused = |ins: &[(&str, &[Option<usize>])], outs: &[&str]| {
        DecoderPlan::new(&sig(ins, outs), &kv(), CacheLayout::Window).unwrap_err().to_string()
    };
    let two_symbolic: &[Option<usize>] = &[None, None, None, Some(16)];
    let mut ins = ROLES_2D.to_vec();
    ins.push(("past_key_values.0.key", two_symbolic));
    let e = refused(&ins, &["logits", "present.0.key"]);
    assert!(e.starts_with("input 'past_key_values.0.key'") && e.contains("it has 2"), "{e}");
    let mut ins = ROLES_2D[..1].to_vec();
    ins.push(("past_key_values.0.key", CACHE));
    let e = refused(&ins, &["logits", "present.0.key"]);
    assert!(e.starts_with("input 'attention_mask'"), "{e}");
    // Without position_ids (positions from the mask, as onnxruntime-genai's models derive them) it plans.
    let mut ins = ROLES_2D[..2].to_vec();
    ins.push(("past_key_values.0.key", CACHE));
    assert!(DecoderPlan::new(&sig(&ins, &["logits", "present.0.key"]), &kv(), CacheLayout::Window).is_ok());
    let mut ins = ROLES_2D.to_vec();
    ins.extend([("past_key_values.0.key", CACHE), ("token_type_ids", &[None, None][..])]);
    let e = refused(&ins, &["logits", "present.0.key"]);
    assert!(e.starts_with("input 'token_type_ids'") && e.contains("--const"), "{e}");
    // No named pair and not one output per cache after the logits.
    let mut ins = ROLES_2D.to_vec();
    ins.extend([("pk0", CACHE), ("pv0", CACHE)]);
    let e = refused(&ins, &["view_9", "cat_1"]);
    assert!(e.contains("found no cache inputs"), "{e}");
}
