//! Ranged dims in buckets (`--buckets`): the range of one ranged dim cut into consecutive parts, each compiled
//! through the whole pipeline for its own values (a part of one value at that value, with no masks and nothing
//! scaled), and the parts' artifacts merged into one plan whose `ranges.buckets` say which part runs which values.
//!
//! The parts share the artifact's memory: a run replays one part, and no part keeps anything between runs (ranged
//! dims and `--kv-cache` do not combine), so part `b`'s `j`-th intermediate buffer is part `c`'s `j`-th too (sized
//! for the larger), and each input and output has one buffer, sized for the part that lays it out longest. Weights
//! are shared by content: a tensor two parts store with the same bytes is stored once (parts whose passes store a
//! weight differently, a K-major copy for one-row products, keep one copy each).
//!
//! **Architecture Invariant:** the part that holds the dim's max is merged first and keeps its kernel and buffer
//! indices, so its report (every total at the max, as for one tiling) describes the artifact's `dispatches`.

use crate::{build as build_one, Buckets, Built, CompileError, CompileOptions};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use wgslc_artifact as art;
use wgslc_emit::{WeightTensor, WeightTensors};

/// `Buckets::Auto` cuts at the powers of four instead of two where the powers of two would make more buckets
/// than this (each bucket compiles the model twice and adds its kernels to the artifact's load).
pub const MAX_AUTO: usize = 12;

/// The buckets `opts` asks for, as `(min, max)` in order: `None` for one tiling over the whole range (no ranged
/// dim, `Buckets::None`, a cut that leaves one part, or `Auto` over dims of different ranges).
pub(crate) fn cuts(opts: &CompileOptions) -> Result<Option<Vec<(usize, usize)>>, CompileError> {
    let bad = |m: String| Err(CompileError::Buckets(m));
    if opts.buckets == Buckets::None {
        return Ok(None);
    }
    crate::ranged::check_ranges(opts)?;
    let ranged: Vec<&wgslc_passes::DimRange> = opts.ranges.iter().filter(|r| r.min < r.max).collect();
    let Some(first) = ranged.first() else {
        return match opts.buckets {
            Buckets::Ends(_) => bad("there is no ranged dim to cut (--dim NAME=MIN..MAX)".into()),
            _ => Ok(None),
        };
    };
    let (min, max) = (first.min, first.max);
    if let Some(other) = ranged.iter().find(|r| (r.min, r.max) != (min, max)) {
        return match opts.buckets {
            Buckets::Ends(_) => bad(format!(
                "cuts one ranged dim, and {}={min}..{max} and {}={}..{} have different ranges",
                first.name, other.name, other.min, other.max
            )),
            _ => Ok(None),
        };
    }
    let ends = match &opts.buckets {
        Buckets::Ends(ends) => {
            let mut prev = None;
            for &e in ends {
                if e < min || e >= max || prev.is_some_and(|p| e <= p) {
                    return bad(format!(
                        "{e}: each bucket's end must lie in {min}..{} (the last bucket ends at MAX), in increasing order",
                        max - 1
                    ));
                }
                prev = Some(e);
            }
            ends.iter().copied().chain([max]).collect()
        }
        _ => auto_ends(min, max),
    };
    let mut lo = min;
    let mut out = Vec::with_capacity(ends.len());
    for e in ends {
        out.push((lo, e));
        lo = e + 1;
    }
    Ok((out.len() > 1).then_some(out))
}

/// `Buckets::Auto`'s ends: the powers of two in `min..max`, then `max`; the powers of four where that would make
/// more than [`MAX_AUTO`] buckets.
fn auto_ends(min: usize, max: usize) -> Vec<usize> {
    let ends = |base: usize| {
        let mut out: Vec<usize> = std::iter::successors(Some(1usize), |&p| p.checked_mul(base))
            .take_while(|&p| p < max)
            .filter(|&p| p >= min)
            .collect();
        out.push(max);
        out
    };
    let twos = ends(2);
    if twos.len() <= MAX_AUTO {
        twos
    } else {
        ends(4)
    }
}

/// Compiles each bucket of `cuts` (the one holding the max first) and merges them into one artifact. `None` when
/// `Buckets::Auto` finds that the ranged dims vary independently (a bucket compiled them as several dims): the
/// caller compiles one tiling instead.
pub(crate) fn build(
    model: &Path,
    opts: &CompileOptions,
    cuts: &[(usize, usize)],
) -> Result<Option<Built>, CompileError> {
    let names: Vec<String> = opts.ranges.iter().filter(|r| r.min < r.max).map(|r| r.name.clone()).collect();
    let last = cuts.len() - 1;
    let mut m = Merge::new(opts.limits.max_buffer_size);
    // The first bucket decides which weights are stored K-major; the others store the same ones so.
    let mut extras = crate::pipeline::Extras::default();
    for i in std::iter::once(last).chain(0..last) {
        let (lo, hi) = cuts[i];
        let mut o = opts.clone();
        o.buckets = Buckets::None;
        if lo == hi {
            o.ranges.retain(|r| !names.contains(&r.name));
            o.dims.extend(names.iter().map(|n| (n.clone(), lo)));
        } else {
            for r in o.ranges.iter_mut().filter(|r| names.contains(&r.name)) {
                (r.min, r.max) = (lo, hi);
            }
        }
        let b = build_one(model, &o, &extras).map_err(|e| CompileError::Bucket {
            name: names.join(", "),
            lo,
            hi,
            source: Box::new(e),
        })?;
        if extras.kmajor_only.is_none() {
            let transposed = b.plan.weights.iter().filter_map(|w| {
                let base = w.name.split_once('#').map_or(w.name.as_str(), |(n, _)| n);
                base.strip_suffix(wgslc_passes::kmajor_name("").as_str()).map(str::to_string)
            });
            extras.kmajor_only = Some(transposed.collect());
        }
        if let Some(r) = b.plan.ranges.as_ref().filter(|r| r.dims.len() != 1) {
            if opts.buckets == Buckets::Auto {
                return Ok(None);
            }
            let dims: Vec<&str> = r.dims.iter().map(|d| d.name.as_str()).collect();
            return Err(CompileError::Buckets(format!(
                "cuts one ranged dim, and the model takes {} as {} dims that vary independently ({}): give one \
                 range, or --buckets none",
                names.join(", "),
                dims.len(),
                dims.join(", ")
            )));
        }
        m.add(i, lo, hi, b)?;
    }
    m.finish(&names, cuts).map(Some)
}

/// What one bucket's plan contributes beyond its kernels: its values, dispatches and tensors.
struct Part {
    /// Its index in the cuts.
    index: usize,
    lo: usize,
    hi: usize,
    dispatches: Vec<usize>,
    /// Its inputs and outputs, their buffers the merged plan's.
    inputs: Vec<art::TensorSpec>,
    outputs: Vec<art::TensorSpec>,
    /// A bucket compiled for a range: its dims (one, its name the tied symbols').
    dims: Option<Vec<art::DimRange>>,
}

/// A buffer's role in a bucket's plan, which names the merged buffer it becomes.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Role {
    Input(String),
    Output(String),
    Dims,
    /// The bucket's `j`-th intermediate buffer.
    Intermediate(usize),
}

/// The merged artifact being built.
struct Merge {
    max_buffer: u64,
    buffers: Vec<art::Buffer>,
    roles: HashMap<Role, usize>,
    kernels: Vec<art::Kernel>,
    wgsl: Vec<wgslc_emit::KernelSource>,
    weights: WeightTensors,
    specs: Vec<art::WeightSpec>,
    /// Per merged weight: the bytes its slot holds from its offset.
    reserved: Vec<u64>,
    by_content: HashMap<u64, Vec<usize>>,
    /// The weight buffer new tensors go into, and the offset of the next.
    fill: Option<(usize, u64)>,
    parts: Vec<Part>,
    /// The first bucket's (the max's) report, notes and source node count.
    first: Option<(wgslc_emit::report::Report, usize)>,
    notes: Vec<String>,
}

fn content_hash(t: &WeightTensor) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{:?}", t.dtype).hash(&mut h);
    t.shape.hash(&mut h);
    t.data.hash(&mut h);
    h.finish()
}

fn bug(what: &str) -> CompileError {
    CompileError::Buckets(format!("{what} (a wgslc bug)"))
}

impl Merge {
    fn new(max_buffer: u64) -> Merge {
        Merge {
            max_buffer,
            buffers: Vec::new(),
            roles: HashMap::new(),
            kernels: Vec::new(),
            wgsl: Vec::new(),
            weights: WeightTensors::new(),
            specs: Vec::new(),
            reserved: Vec::new(),
            by_content: HashMap::new(),
            fill: None,
            parts: Vec::new(),
            first: None,
            notes: Vec::new(),
        }
    }

    /// A weight tensor in the merged plan: one of the same content and type, or a new slot of `size` bytes.
    fn weight(&mut self, ws: &art::WeightSpec, t: WeightTensor, size: u64) -> Result<usize, CompileError> {
        let h = content_hash(&t);
        let same = |s: &art::WeightSpec| s.shape == ws.shape && s.storage == ws.storage;
        if let Some(&i) = self
            .by_content
            .get(&h)
            .into_iter()
            .flatten()
            .find(|&&i| same(&self.specs[i]) && self.weights[&self.specs[i].name] == t)
        {
            if size > self.reserved[i] {
                return Err(bug(&format!("weight '{}' is bound past its slot in another bucket", ws.name)));
            }
            return Ok(i);
        }
        let mut name = ws.name.clone();
        let mut k = 1;
        while self.weights.contains_key(&name) {
            name = format!("{}#{k}", ws.name);
            k += 1;
        }
        let (buffer, offset) = match self.fill {
            Some((b, f)) if f + size <= self.max_buffer => (b, f),
            _ => {
                let n = self.buffers.iter().filter(|b| b.kind == art::BufferKind::Weight).count();
                self.buffers.push(art::Buffer { name: format!("weights{n}"), size: 0, kind: art::BufferKind::Weight });
                (self.buffers.len() - 1, 0)
            }
        };
        if size > self.max_buffer {
            return Err(bug(&format!("weight '{}' is larger than a buffer", ws.name)));
        }
        self.buffers[buffer].size = offset + size;
        self.fill = Some((buffer, (offset + size).next_multiple_of(256)));
        self.specs.push(art::WeightSpec {
            name: name.clone(),
            shape: ws.shape.clone(),
            storage: ws.storage,
            buffer,
            offset,
        });
        self.weights.insert(name, t);
        self.reserved.push(size);
        self.by_content.entry(h).or_default().push(self.specs.len() - 1);
        Ok(self.specs.len() - 1)
    }

    /// Adds bucket `index` (`lo..=hi`), compiled: its kernels with their bindings moved to the merged buffers and
    /// weights. The first bucket added keeps every index.
    fn add(&mut self, index: usize, lo: usize, hi: usize, b: Built) -> Result<(), CompileError> {
        let Built { plan: p, wgsl, mut weights, report, notes, source_nodes } = b;
        let first = self.first.is_none();
        // Weights: the slot each binds from, and each tensor's merged place.
        let spec_at = |buffer: usize, offset: u64| {
            p.weights
                .iter()
                .enumerate()
                .filter(|(_, w)| w.buffer == buffer && w.offset <= offset)
                .max_by_key(|(_, w)| w.offset)
                .map(|(i, _)| i)
                .ok_or_else(|| bug("a kernel binds a weight buffer where no weight is"))
        };
        let mut sizes: Vec<u64> = p
            .weights
            .iter()
            .map(|w| weights.get(&w.name).map_or(0, |t| (t.data.len() as u64).next_multiple_of(16)))
            .collect();
        for bd in p.kernels.iter().flat_map(|k| &k.bindings) {
            if p.buffers[bd.buffer].kind == art::BufferKind::Weight {
                let w = spec_at(bd.buffer, bd.offset)?;
                sizes[w] = sizes[w].max(bd.offset + bd.size - p.weights[w].offset);
            }
        }
        // Buffers by role; the first bucket's, weights too, as they are.
        let holder = |specs: &[art::TensorSpec], j: usize| {
            specs
                .iter()
                .find(|t| t.buffer == j)
                .map(|t| t.name.clone())
                .ok_or_else(|| bug("a tensor's buffer holds none"))
        };
        let dims_buffer = p.ranges.as_ref().map(|r| r.buffer);
        let mut map = vec![usize::MAX; p.buffers.len()];
        let mut intermediates = 0;
        for (j, buf) in p.buffers.iter().enumerate() {
            let role = match buf.kind {
                art::BufferKind::Weight if first => {
                    self.buffers.push(buf.clone());
                    map[j] = self.buffers.len() - 1;
                    continue;
                }
                art::BufferKind::Weight => continue,
                art::BufferKind::Input if dims_buffer == Some(j) => Role::Dims,
                art::BufferKind::Input => Role::Input(holder(&p.inputs, j)?),
                art::BufferKind::Output => Role::Output(holder(&p.outputs, j)?),
                art::BufferKind::Intermediate => {
                    intermediates += 1;
                    Role::Intermediate(intermediates - 1)
                }
            };
            let at = match self.roles.get(&role) {
                Some(&at) => at,
                None => {
                    self.buffers.push(art::Buffer { name: buf.name.clone(), size: 0, kind: buf.kind });
                    self.roles.insert(role, self.buffers.len() - 1);
                    self.buffers.len() - 1
                }
            };
            self.buffers[at].size = self.buffers[at].size.max(buf.size);
            map[j] = at;
        }
        let mut places = Vec::with_capacity(p.weights.len());
        for (w, ws) in p.weights.iter().enumerate() {
            let t = weights.remove(&ws.name).ok_or_else(|| bug(&format!("weight '{}' has no bytes", ws.name)))?;
            if first {
                // As the bucket placed it: the merged weights start as its own.
                let spec = art::WeightSpec { buffer: map[ws.buffer], ..ws.clone() };
                self.by_content.entry(content_hash(&t)).or_default().push(self.specs.len());
                self.specs.push(spec);
                self.weights.insert(ws.name.clone(), t);
                self.reserved.push(sizes[w]);
                places.push(self.specs.len() - 1);
            } else {
                places.push(self.weight(ws, t, sizes[w])?);
            }
        }
        // Kernels, numbered on; their WGSL files named by their new index.
        let base = self.kernels.len();
        for (i, (k, src)) in p.kernels.iter().zip(wgsl).enumerate() {
            let mut k = k.clone();
            let file = k.wgsl.strip_prefix("kernels/").and_then(|f| f.split_once('_')).map_or("kernel.wgsl", |f| f.1);
            k.wgsl = format!("kernels/k{:03}_{file}", base + i);
            if k.subgroups.is_some() {
                k.subgroups = Some(k.wgsl.replace(".wgsl", ".subgroups.wgsl"));
            }
            for bd in &mut k.bindings {
                if p.buffers[bd.buffer].kind == art::BufferKind::Weight {
                    let w = spec_at(bd.buffer, bd.offset)?;
                    let to = &self.specs[places[w]];
                    (bd.buffer, bd.offset) = (to.buffer, to.offset + (bd.offset - p.weights[w].offset));
                } else {
                    bd.buffer = map[bd.buffer];
                }
            }
            self.kernels.push(k);
            self.wgsl.push(src);
        }
        let moved = |specs: &[art::TensorSpec]| {
            specs.iter().map(|t| art::TensorSpec { buffer: map[t.buffer], ..t.clone() }).collect::<Vec<_>>()
        };
        self.parts.push(Part {
            index,
            lo,
            hi,
            dispatches: p.dispatches.iter().map(|d| d + base).collect(),
            inputs: moved(&p.inputs),
            outputs: moved(&p.outputs),
            dims: p.ranges.as_ref().map(|r| r.dims.clone()),
        });
        if first {
            self.first = Some((report, source_nodes));
        }
        for n in notes {
            if !self.notes.contains(&n) {
                self.notes.push(n);
            }
        }
        Ok(())
    }

    /// The merged plan: the inputs and outputs at the dim's max with their ranged axes (every bucket's checked to
    /// be them laid out at its own max), the buckets in order, the last one's dispatches the plan's.
    fn finish(mut self, names: &[String], cuts: &[(usize, usize)]) -> Result<Built, CompileError> {
        self.parts.sort_by_key(|p| p.index);
        let (min, max) = (cuts[0].0, cuts[cuts.len() - 1].1);
        let (name, inputs, outputs) = match self.parts.iter().find(|p| p.dims.is_some()) {
            Some(p) => {
                let name = p.dims.as_ref().and_then(|d| d.first()).map(|d| d.name.clone()).unwrap_or_default();
                let at_max = |specs: &[art::TensorSpec]| specs.iter().map(|t| with_extent(t, max)).collect::<Vec<_>>();
                (name, at_max(&p.inputs), at_max(&p.outputs))
            }
            None => (names.join("="), interface(&self.parts, |p| &p.inputs)?, interface(&self.parts, |p| &p.outputs)?),
        };
        for p in &self.parts {
            for (what, want, got) in [("input", &inputs, &p.inputs), ("output", &outputs, &p.outputs)] {
                let fits = want.len() == got.len()
                    && want.iter().zip(got).all(|(w, g)| {
                        let laid = with_extent(w, p.hi);
                        g.name == w.name
                            && (g.dtype, g.storage, g.buffer) == (w.dtype, w.storage, w.buffer)
                            && g.shape == laid.shape
                            && (p.dims.is_none() || g.ranged == w.ranged)
                    });
                if !fits {
                    return Err(CompileError::Buckets(format!(
                        "the bucket {}..{} compiles the model's {what}s otherwise than the bucket {}..{max} \
                         (their shapes do not follow '{name}' alike): give --buckets none",
                        p.lo,
                        p.hi,
                        cuts[cuts.len() - 1].0
                    )));
                }
            }
        }
        let dims_buffer = match self.roles.get(&Role::Dims) {
            Some(&b) => b,
            None => {
                self.buffers.push(art::Buffer {
                    name: wgslc_passes::DIMS_INPUT.into(),
                    size: 4,
                    kind: art::BufferKind::Input,
                });
                self.buffers.len() - 1
            }
        };
        let buckets: Vec<art::Bucket> =
            self.parts.iter().map(|p| art::Bucket { min: p.lo, max: p.hi, dispatches: p.dispatches.clone() }).collect();
        let dispatches = buckets.last().map(|b| b.dispatches.clone()).unwrap_or_default();
        let plan = art::Plan {
            format: art::FORMAT.into(),
            version: art::VERSION,
            inputs,
            outputs,
            buffers: self.buffers,
            weights: self.specs,
            kernels: self.kernels,
            dispatches,
            decoder: None,
            ranges: Some(art::Ranges {
                dims: vec![art::DimRange { name: name.clone(), min, max }],
                buffer: dims_buffer,
                buckets,
            }),
        };
        plan.check().map_err(|e| bug(&format!("the merged plan is invalid: {e}")))?;
        let (mut report, source_nodes) = self.first.ok_or_else(|| bug("no bucket was compiled"))?;
        for r in &mut report.ranges {
            (r.name, r.min) = (name.clone(), min);
        }
        report.buckets = self
            .parts
            .iter()
            .map(|p| wgslc_emit::report::BucketReport {
                min: p.lo,
                max: p.hi,
                dispatches: p.dispatches.len(),
                scaled_kernels: p.dispatches.iter().filter(|&&k| plan.kernels[k].scale.is_some()).count(),
            })
            .collect();
        Ok(Built { plan, wgsl: self.wgsl, weights: self.weights, report, notes: self.notes, source_nodes })
    }
}

/// `t` laid out for the dim at `n`: each ranged axis at `factor · n`.
fn with_extent(t: &art::TensorSpec, n: usize) -> art::TensorSpec {
    t.at_values(&[n])
}

/// The tensors of buckets that were each compiled at one value (no bucket for a range told the ranged axes): an
/// axis is ranged where its extents differ across the buckets, with the factor every bucket's extent is of its
/// value; the shapes at the last bucket's value.
fn interface(
    parts: &[Part],
    specs: impl Fn(&Part) -> &Vec<art::TensorSpec>,
) -> Result<Vec<art::TensorSpec>, CompileError> {
    let last = parts.last().ok_or_else(|| bug("no bucket was compiled"))?;
    let mut out = Vec::new();
    for (i, t) in specs(last).iter().enumerate() {
        let mut t = t.clone();
        for axis in 0..t.shape.len() {
            let extents: Vec<(usize, usize)> =
                parts.iter().filter_map(|p| Some((specs(p).get(i)?.shape.get(axis).copied()?, p.lo))).collect();
            if extents.iter().all(|&(e, _)| e == t.shape[axis]) {
                continue;
            }
            let factor = extents[0].0 / extents[0].1;
            if extents.iter().any(|&(e, n)| e != factor * n) || factor == 0 {
                return Err(CompileError::Buckets(format!(
                    "'{}' axis {axis} does not grow in proportion to the dim across the buckets: give --buckets none",
                    t.name
                )));
            }
            t.ranged.push(art::RangedAxis { axis, dim: 0, factor });
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(ranges: &[(&str, usize, usize)], buckets: Buckets) -> CompileOptions {
        let ranges = ranges.iter().map(|&(n, min, max)| wgslc_passes::DimRange { name: n.into(), min, max }).collect();
        CompileOptions { ranges, buckets, ..Default::default() }
    }

    /// Auto: the powers of two inside the range (a bucket of one value where a power is the min), the powers of
    /// four past twelve buckets; given ends must be increasing and below MAX; dims of different ranges are cut only
    /// on request, and then refused; `none`, or a cut that leaves one part, is one tiling.
    #[test]
    fn cuts_follow_the_powers_of_two_or_the_given_ends() {
        let cut = |r: &[(&str, usize, usize)], b: Buckets| cuts(&opts(r, b)).map_err(|e| e.to_string());
        let auto = cut(&[("n", 1, 512)], Buckets::Auto).unwrap().unwrap();
        assert_eq!(auto.len(), 10);
        assert_eq!(&auto[..4], [(1, 1), (2, 2), (3, 4), (5, 8)]);
        assert_eq!(auto[9], (257, 512));
        assert_eq!(cut(&[("n", 3, 100)], Buckets::Auto).unwrap().unwrap()[0], (3, 4));
        let wide = cut(&[("n", 1, 1 << 20)], Buckets::Auto).unwrap().unwrap();
        assert!(wide.len() <= MAX_AUTO && wide[1] == (2, 4), "{wide:?}");
        assert_eq!(cut(&[("n", 1, 32)], Buckets::Ends(vec![1, 5])).unwrap().unwrap(), [(1, 1), (2, 5), (6, 32)]);
        assert!(cut(&[("n", 1, 32)], Buckets::Ends(vec![32])).unwrap_err().contains("must lie in 1..31"));
        assert!(cut(&[("n", 1, 32)], Buckets::Ends(vec![5, 5])).unwrap_err().contains("increasing"));
        assert_eq!(cut(&[("n", 1, 32)], Buckets::None).unwrap(), None);
        assert_eq!(cut(&[("n", 1, 2)], Buckets::Auto).unwrap().unwrap(), [(1, 1), (2, 2)]);
        let two = [("a", 1, 8), ("b", 1, 16)];
        assert_eq!(cut(&two, Buckets::Auto).unwrap(), None);
        assert!(cut(&two, Buckets::Ends(vec![4])).unwrap_err().contains("different ranges"));
        assert!(cut(&[], Buckets::Ends(vec![4])).unwrap_err().contains("no ranged dim"));
        assert_eq!(cut(&[], Buckets::Auto).unwrap(), None);
    }
}
