//! Einsum as ops the emitter has: each operand's repeated labels become diagonals (a Gather over the flattened
//! pair of axes), labels that no later operand or the output names are summed out (ReduceSum), and operands are
//! combined left to right as batched MatMuls `[batch, left, contracted] · [batch, contracted, right]` after
//! Transposes (which fold into the products where they can); the result is summed and transposed to the output's
//! labels. `...` stands for the same broadcast dims in every operand; without `->` the output is the ellipsis
//! dims, then the labels that appear once, in alphabetical order (ONNX's implicit mode).

use crate::PassError;
use wgslc_ir::{Builder, Op, ReduceOp, Tensor, TensorType, ValueId};

/// An operand as the expansion goes: its value, one label per axis, and its shape.
struct Term {
    v: ValueId,
    labels: Vec<char>,
    shape: Vec<usize>,
}

/// The labels of one side of the equation, `...` replaced by the last `rank - letters` of `ell`.
fn parse(
    term: &str,
    rank: Option<usize>,
    ell: &[char],
    err: &dyn Fn(String) -> PassError,
) -> Result<Vec<char>, PassError> {
    let (before, after, dots) = match term.split_once("...") {
        Some((a, b)) => (a, b, true),
        None => (term, "", false),
    };
    if let Some(c) = before.chars().chain(after.chars()).find(|c| !c.is_ascii_alphabetic()) {
        return Err(err(format!("'{term}' has the label '{c}' (labels are letters, and '...')")));
    }
    let letters = before.len() + after.len();
    let e = match (dots, rank) {
        (false, Some(r)) if r != letters => {
            return Err(err(format!("'{term}' names {letters} axes of an operand of rank {r}")));
        }
        (false, _) => 0,
        (true, Some(r)) if r < letters => {
            return Err(err(format!("'{term}' names {letters} axes of an operand of rank {r}")));
        }
        (true, Some(r)) => r - letters,
        (true, None) => ell.len(),
    };
    Ok(before.chars().chain(ell[ell.len() - e..].iter().copied()).chain(after.chars()).collect())
}

pub(super) fn expand(
    b: &mut Builder,
    equation: &str,
    operands: &[(ValueId, TensorType)],
    err: &dyn Fn(String) -> PassError,
) -> Result<ValueId, PassError> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let sides: Vec<&str> = lhs.split(',').collect();
    if sides.len() != operands.len() {
        return Err(err(format!("'{equation}' has {} operands, the node {}", sides.len(), operands.len())));
    }
    // The ellipsis covers the most axes any operand leaves to it; labels outside the letters stand for them.
    let mut e = 0;
    for (side, (_, t)) in sides.iter().zip(operands) {
        if side.contains("...") {
            let letters = side.chars().filter(|c| c.is_ascii_alphabetic()).count();
            e = e.max(t.rank().saturating_sub(letters));
        }
    }
    let ell: Vec<char> = (0..e as u32).map(|k| char::from_u32(0xE000 + k).expect("private use")).collect();
    let mut terms = Vec::new();
    for (side, (v, t)) in sides.iter().zip(operands) {
        let labels = parse(side, Some(t.rank()), &ell, err)?;
        terms.push(Term { v: *v, labels, shape: t.shape.clone() });
    }
    let output: Vec<char> = match rhs {
        Some(r) => parse(r, None, &ell, err)?,
        None => {
            let mut once: Vec<char> = Vec::new();
            for c in sides.concat().chars().filter(|c| c.is_ascii_alphabetic()) {
                let n = sides.concat().chars().filter(|&d| d == c).count();
                if n == 1 && !once.contains(&c) {
                    once.push(c);
                }
            }
            once.sort();
            ell.iter().copied().chain(once).collect()
        }
    };
    for (i, c) in output.iter().enumerate() {
        if output[..i].contains(c) || !terms.iter().any(|t| t.labels.contains(c)) {
            return Err(err(format!("the output of '{equation}' repeats a label or names one no operand has")));
        }
    }
    // Every label's size: equal everywhere, or 1 (broadcast).
    let mut size: Vec<(char, usize)> = Vec::new();
    for t in &terms {
        for (&c, &n) in t.labels.iter().zip(&t.shape) {
            match size.iter_mut().find(|(l, _)| *l == c) {
                Some((_, m)) if *m == n || n == 1 => {}
                Some((_, m)) if *m == 1 => *m = n,
                Some((_, m)) => return Err(err(format!("'{equation}': a label has sizes {m} and {n}"))),
                None => size.push((c, n)),
            }
        }
    }
    let size_of = |c: char| size.iter().find(|(l, _)| *l == c).map(|(_, n)| *n).expect("every label sized");

    let mut terms: Vec<Term> = terms.into_iter().map(|t| diagonals(b, t, err)).collect::<Result<_, _>>()?;
    let mut acc = terms.remove(0);
    let needed = |rest: &[Term]| -> Vec<char> {
        output.iter().copied().chain(rest.iter().flat_map(|t| t.labels.iter().copied())).collect()
    };
    if terms.is_empty() {
        acc = sum_out(b, acc, &needed(&[]))?;
    }
    while !terms.is_empty() {
        let next = terms.remove(0);
        let keep = needed(&terms);
        let (a, c) = (sum_out(b, acc, &[keep.clone(), next.labels.clone()].concat())?, next);
        let c = sum_out(b, c, &[keep.clone(), a.labels.clone()].concat())?;
        acc = product(b, a, c, &keep, &size_of)?;
    }
    // The output order (labels of size 1 that were broadcast are expanded by the product already).
    let perm: Vec<usize> = output.iter().map(|c| acc.labels.iter().position(|l| l == c).expect("kept")).collect();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(acc.v);
    }
    Ok(b.transpose(acc.v, &perm)?)
}

/// Repeated labels of one operand become its diagonal along them.
fn diagonals(b: &mut Builder, mut t: Term, err: &dyn Fn(String) -> PassError) -> Result<Term, PassError> {
    while let Some((i, j)) = (0..t.labels.len())
        .find_map(|i| t.labels[i + 1..].iter().position(|&c| c == t.labels[i]).map(|k| (i, i + 1 + k)))
    {
        let n = t.shape[i];
        if t.shape[j] != n {
            return Err(err(format!("a repeated label has sizes {n} and {}", t.shape[j])));
        }
        let mut perm: Vec<usize> = (0..t.labels.len()).filter(|&a| a != i && a != j).collect();
        perm.extend([i, j]);
        let x = b.transpose(t.v, &perm)?;
        let mut flat: Vec<usize> = perm[..perm.len() - 2].iter().map(|&a| t.shape[a]).collect();
        flat.push(n * n);
        let x = b.reshape(x, &flat)?;
        let idx = b.konst(Tensor::i64(vec![n], (0..n as i64).map(|k| k * (n as i64 + 1)).collect()));
        let v = b.op(Op::Gather { axis: flat.len() as i64 - 1 }, &[Some(x), Some(idx)])?;
        let mut labels: Vec<char> = perm[..perm.len() - 2].iter().map(|&a| t.labels[a]).collect();
        labels.push(t.labels[i]);
        let mut shape = flat;
        *shape.last_mut().expect("rank ≥ 1") = n;
        t = Term { v, labels, shape };
    }
    Ok(t)
}

/// Sums the axes whose labels `keep` does not name.
fn sum_out(b: &mut Builder, t: Term, keep: &[char]) -> Result<Term, PassError> {
    let axes: Vec<i64> = (0..t.labels.len()).filter(|&a| !keep.contains(&t.labels[a])).map(|a| a as i64).collect();
    if axes.is_empty() {
        return Ok(t);
    }
    let ax = b.ints(&axes);
    let op = Op::Reduce { op: ReduceOp::Sum, axes: None, keepdims: false, noop_with_empty_axes: false };
    let v = b.op(op, &[Some(t.v), Some(ax)])?;
    let kept: Vec<usize> = (0..t.labels.len()).filter(|a| !axes.contains(&(*a as i64))).collect();
    Ok(Term {
        v,
        labels: kept.iter().map(|&a| t.labels[a]).collect(),
        shape: kept.iter().map(|&a| t.shape[a]).collect(),
    })
}

/// `a · c` as one batched MatMul: labels both have and `keep` names are the batch, those both have otherwise are
/// contracted, the rest are a's rows and c's columns.
fn product(
    b: &mut Builder,
    a: Term,
    c: Term,
    keep: &[char],
    size_of: &dyn Fn(char) -> usize,
) -> Result<Term, PassError> {
    let both = |l: &char| a.labels.contains(l) && c.labels.contains(l);
    let batch: Vec<char> = a.labels.iter().copied().filter(|l| both(l) && keep.contains(l)).collect();
    let contract: Vec<char> = a.labels.iter().copied().filter(|l| both(l) && !keep.contains(l)).collect();
    let left: Vec<char> = a.labels.iter().copied().filter(|l| !both(l)).collect();
    let right: Vec<char> = c.labels.iter().copied().filter(|l| !both(l)).collect();
    let prod = |ls: &[char]| ls.iter().map(|&l| size_of(l)).product::<usize>();
    // Each side transposed to [batch, left, contracted] / [batch, contracted, right], broadcast to full sizes.
    let arrange = |b: &mut Builder, t: &Term, order: &[char], shape3: [usize; 3]| -> Result<ValueId, PassError> {
        let perm: Vec<usize> = order.iter().map(|l| t.labels.iter().position(|x| x == l).expect("has it")).collect();
        let mut v = t.v;
        if perm.iter().enumerate().any(|(i, &p)| i != p) {
            v = b.transpose(v, &perm)?;
        }
        let full: Vec<usize> = order.iter().map(|&l| size_of(l)).collect();
        if perm.iter().map(|&p| t.shape[p]).collect::<Vec<_>>() != full {
            let s = b.ints(&full.iter().map(|&d| d as i64).collect::<Vec<_>>());
            v = b.op(Op::Expand, &[Some(v), Some(s)])?;
        }
        Ok(b.reshape(v, &shape3)?)
    };
    let (nb, nl, nk, nr) = (prod(&batch), prod(&left), prod(&contract), prod(&right));
    let av = arrange(b, &a, &[batch.clone(), left.clone(), contract.clone()].concat(), [nb, nl, nk])?;
    let cv = arrange(b, &c, &[batch.clone(), contract.clone(), right.clone()].concat(), [nb, nk, nr])?;
    let v = b.op(Op::MatMul, &[Some(av), Some(cv)])?;
    let labels = [batch, left, right].concat();
    let shape: Vec<usize> = labels.iter().map(|&l| size_of(l)).collect();
    let v = b.reshape(v, &shape)?;
    Ok(Term { v, labels, shape })
}
