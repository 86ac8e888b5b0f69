//! The fusion report: what each kernel computes, what it moves, and why each remaining kernel boundary exists.
//! Written as DIR/report.json by every compile; `wgslc report` renders it as text or one offline HTML file.

use crate::Validated;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use wgslc_ir::{Graph, NodeId, Op};
use wgslc_passes::{MemoryPlan, MemoryStats, Schedule};

/// The bandwidth the floor times assume unless told otherwise (GB/s, an H100's HBM3 roughly).
pub const DEFAULT_BANDWIDTH_GBPS: f64 = 3000.0;

/// What report.json is: [`REPORT_FORMAT`] at [`REPORT_VERSION`]. Reports written before these fields existed
/// read as version 1 (the same fields).
pub const REPORT_FORMAT: &str = "wgslc-report";
pub const REPORT_VERSION: u32 = 1;

fn report_format() -> String {
    REPORT_FORMAT.into()
}

fn report_version() -> u32 {
    REPORT_VERSION
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    #[serde(default = "report_format")]
    pub format: String,
    /// [`REPORT_VERSION`]: a reader refuses a report of a newer version by name.
    #[serde(default = "report_version")]
    pub version: u32,
    /// Nodes in the model file (ONNX nodes, or a .pt2 program's ATen nodes).
    pub source_nodes: usize,
    /// Nodes left after shape inference and constant folding (views included).
    pub graph_nodes: usize,
    /// Dispatches per inference.
    pub dispatches: usize,
    /// Bytes every dispatch reads and writes, summed: what this artifact moves per inference.
    pub bytes_moved: u64,
    /// What one kernel per op (`--no-fuse`) would move: every non-view node reads its inputs and writes its outputs.
    pub unfused_bytes_moved: u64,
    pub flops: u64,
    /// The bandwidth used for `floor_us` (GB/s).
    pub bandwidth_gbps: f64,
    /// bytes_moved at that bandwidth, in microseconds: no schedule of these kernels runs faster.
    pub floor_us: f64,
    pub kernels: Vec<KernelReport>,
    /// Layout ops folded into their readers' index math (no kernel).
    pub folded: Vec<NodeRef>,
    /// Edges that cross a kernel boundary, with the reason each was not fused.
    pub boundaries: Vec<BoundaryReport>,
    pub memory: MemoryReport,
    /// Artifacts with ranged dims (`--dim NAME=MIN..MAX`) only: each dim and how many kernels dispatch fewer
    /// workgroups below its max. Every byte, FLOP and time above is at the max.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<RangeReport>,
    /// Artifacts whose ranged dim is compiled in buckets (`--buckets`) only: each bucket's values and kernels. The
    /// kernels, totals and memory above are the last bucket's (the one that runs the max).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<BucketReport>,
    /// Artifacts compiled with `--weights f16|q8|q4` only: the weights stored narrower, each with its bytes and
    /// the error of its stored values against the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsReport>,
}

/// `--weights`: what was stored narrower, and what it cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WeightsReport {
    /// `f16`, `q8` or `q4`.
    pub format: String,
    /// Elements per quantization block (q8, q4).
    pub block: usize,
    /// Every weight's bytes before and after, summed (weights not stored narrower are not counted).
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub tensors: Vec<WeightTensorReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WeightTensorReport {
    pub name: String,
    pub shape: Vec<usize>,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The largest |stored − original| over its elements.
    pub max_abs_error: f64,
    /// The root mean square of stored − original, over the original's root mean square.
    pub rel_rms_error: f64,
}

/// A ranged dim of the artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RangeReport {
    pub name: String,
    pub min: usize,
    pub max: usize,
    /// Kernels whose workgroups follow this dim (plan.json `scale`); the rest always run at the max.
    pub scaled_kernels: usize,
}

/// One bucket of a ranged dim: the values it runs, its dispatches, and how many of them dispatch fewer workgroups
/// below its max.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BucketReport {
    pub min: usize,
    pub max: usize,
    pub dispatches: usize,
    pub scaled_kernels: usize,
}

/// The memory plan: totals and every intermediate's lifetime and buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryReport {
    /// The plan's totals (flattened: `planned_bytes`, `lower_bound_bytes`, `naive_bytes`, `weights_bytes`,
    /// `io_bytes`, `split_arenas`, `in_place_kernels`).
    #[serde(flatten)]
    pub stats: MemoryStats,
    pub steps: usize,
    pub buffers: Vec<BufferReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BufferReport {
    pub name: String,
    pub bytes: u64,
    /// The intermediates placed in it: name, bytes, first and last dispatch step (inclusive).
    pub values: Vec<LifetimeReport>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LifetimeReport {
    pub name: String,
    pub bytes: u64,
    /// Byte offset in its buffer.
    pub offset: u64,
    pub first: usize,
    pub last: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeRef {
    pub name: String,
    pub op: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KernelReport {
    pub name: String,
    pub wgsl: String,
    /// The source nodes computed by this kernel, anchor first.
    pub nodes: Vec<NodeRef>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub flops: u64,
    pub floor_us: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BoundaryReport {
    pub producer: NodeRef,
    pub consumer: NodeRef,
    pub value: String,
    /// Bytes written and read again because of this boundary.
    pub bytes: u64,
    pub reason: String,
}

fn node_ref(g: &Graph, n: NodeId) -> NodeRef {
    NodeRef { name: g.node(n).name.clone(), op: g.node(n).op.name().to_string() }
}

fn bytes(g: &Graph, v: wgslc_ir::ValueId) -> u64 {
    wgslc_passes::stored_bytes(g, v)
}

/// Floating-point operations of one node (multiply-adds count two).
fn node_flops(g: &Graph, n: NodeId) -> u64 {
    let node = g.node(n);
    let out = node.outputs.first().map(|&o| g.ty(o).numel() as u64).unwrap_or(0);
    let input = |i: usize| node.inputs.get(i).copied().flatten().map(|v| g.ty(v).clone());
    match &node.op {
        Op::MatMul | Op::Gemm { .. } => {
            let a = input(0).expect("A");
            let k = match node.op {
                Op::Gemm { trans_a: true, .. } => a.shape[0],
                _ => *a.shape.last().unwrap_or(&1),
            };
            2 * out * k as u64
        }
        Op::Conv { window, .. } => {
            let w = input(1).expect("W");
            2 * out * w.shape[1] as u64 * window.kernel.iter().product::<usize>() as u64
        }
        Op::Softmax { .. } | Op::LayerNorm { .. } => 5 * out,
        Op::Reduce { .. } | Op::GlobalPool(_) | Op::ArgReduce { .. } | Op::ArgChunks { .. } | Op::ArgMerge { .. } => {
            input(0).map(|t| t.numel() as u64).unwrap_or(0)
        }
        Op::Pool { window, .. } => out * window.kernel.iter().product::<usize>() as u64,
        Op::Alias | Op::StridedCopy { .. } | Op::TileCopy | Op::Concat { .. } | Op::Gather { .. } => 0,
        Op::GatherElements { .. } | Op::Scatter { .. } | Op::Pad { .. } | Op::RotateHalf | Op::Trilu { .. } => 0,
        // One operation per output element.
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast { .. } => out,
        // A compare per element per step of the scan or selection.
        // Per step: the recurrent product (2·H·G·H per direction and batch element) and the gate arithmetic.
        Op::Recurrence(a) => {
            let gx = input(0).expect("projected inputs");
            let (d, t, b) = (gx.shape[0] as u64, gx.shape[1] as u64, gx.shape[2] as u64);
            let (h, g) = (a.hidden as u64, a.cell.gates() as u64);
            d * t * b * (2 * h * g * h + 10 * g * h)
        }
        Op::CumSum { .. } | Op::TopK { .. } | Op::Sample => input(0).map(|t| t.numel() as u64).unwrap_or(out),
        // A copy of the new rows: no arithmetic.
        Op::CacheWrite { .. } | Op::GatherBlocks { .. } => 0,
        Op::BatchNorm { .. } => 2 * out,
        // Import-level ops never reach a report (shape inference resolves them): counted as one per element.
        wgslc_ir::import_level!() => out,
    }
}

/// Builds the report from the compiled pieces.
pub fn build(
    g: &Graph,
    sched: &Schedule,
    plan: &MemoryPlan,
    kernels: &[Validated],
    artifact: &wgslc_artifact::Plan,
    source_nodes: usize,
) -> Report {
    let bw = DEFAULT_BANDWIDTH_GBPS;
    let mut ks = Vec::new();
    for (k, pk) in kernels.iter().zip(&artifact.kernels) {
        let (mut r, mut w) = (0u64, 0u64);
        let mut seen = HashSet::new();
        for &(v, write) in &k.kernel.bindings {
            let slot = plan.slots[&v];
            if !seen.insert((slot.buffer, slot.offset, write)) {
                continue;
            }
            if write {
                w += k.kernel.stored_bytes.unwrap_or(slot.size);
            } else {
                r += slot.size;
            }
        }
        // An in-place kernel reads its overwritten input through the output binding.
        if let Some(&(out, _)) = k.kernel.bindings.iter().find(|b| b.1) {
            if let Some(&src) = plan.in_place.get(&wgslc_passes::storage_root(g, out)) {
                r += plan.slots[&src].size;
            }
        }
        let flops = k.kernel.nodes.iter().map(|&n| node_flops(g, n)).sum();
        ks.push(KernelReport {
            name: k.kernel.name.clone(),
            wgsl: pk.wgsl.clone(),
            nodes: k.kernel.nodes.iter().map(|&n| node_ref(g, n)).collect(),
            bytes_read: r,
            bytes_written: w,
            flops,
            floor_us: (r + w) as f64 / (bw * 1e3),
        });
    }
    let bytes_moved: u64 = ks.iter().map(|k| k.bytes_read + k.bytes_written).sum();
    let unfused: u64 = g
        .node_ids()
        .filter(|&n| g.node(n).op != Op::Alias)
        .map(|n| {
            let node = g.node(n);
            let ins: HashSet<_> = node.inputs.iter().flatten().collect();
            ins.into_iter().map(|&v| bytes(g, v)).sum::<u64>() + node.outputs.iter().map(|&o| bytes(g, o)).sum::<u64>()
        })
        .sum();
    let boundaries = sched
        .boundaries
        .iter()
        .map(|b| BoundaryReport {
            producer: node_ref(g, b.producer),
            consumer: node_ref(g, b.consumer),
            value: g.value(b.value).name.clone(),
            bytes: bytes(g, b.value),
            reason: b.reason.clone(),
        })
        .collect();
    let mut pool: Vec<BufferReport> = Vec::new();
    let mut index: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for l in &plan.lifetimes {
        let i = *index.entry(l.buffer).or_insert_with(|| {
            pool.push(BufferReport {
                name: plan.buffers[l.buffer].name.clone(),
                bytes: plan.buffers[l.buffer].size,
                values: vec![],
            });
            pool.len() - 1
        });
        pool[i].values.push(LifetimeReport {
            name: g.value(l.value).name.clone(),
            bytes: l.bytes,
            offset: l.offset,
            first: l.first,
            last: l.last,
        });
    }
    let memory = MemoryReport { stats: plan.stats.clone(), steps: sched.kernels.len(), buffers: pool };
    let mut folded: Vec<NodeId> = sched.folded.iter().copied().collect();
    folded.sort();
    Report {
        format: report_format(),
        version: REPORT_VERSION,
        source_nodes,
        graph_nodes: g.num_nodes(),
        dispatches: artifact.dispatches.len(),
        bytes_moved,
        unfused_bytes_moved: unfused,
        flops: ks.iter().map(|k| k.flops).sum(),
        bandwidth_gbps: bw,
        floor_us: bytes_moved as f64 / (bw * 1e3),
        kernels: ks,
        folded: folded.into_iter().map(|n| node_ref(g, n)).collect(),
        boundaries,
        memory,
        ranges: artifact
            .ranges
            .iter()
            .flat_map(|r| r.dims.iter().enumerate())
            .map(|(d, dim)| RangeReport {
                name: dim.name.clone(),
                min: dim.min,
                max: dim.max,
                scaled_kernels: artifact.kernels.iter().filter(|k| k.scale.is_some_and(|s| s.dim == d)).count(),
            })
            .collect(),
        buckets: Vec::new(),
        weights: None,
    }
}

impl MemoryReport {
    /// One line: planned vs lower bound vs a buffer per value, then weights and inputs/outputs.
    pub fn summary(&self) -> String {
        let st = &self.stats;
        format!(
            "intermediates {} B planned in {}, {} B lower bound ({:.2}x), {} B with a buffer each; {} kernels write in place; weights {} B; inputs and outputs {} B",
            st.planned_bytes,
            if st.split_arenas { "two sets of arenas (inputs bound read-only)" } else { "arenas" },
            st.lower_bound_bytes,
            st.planned_bytes as f64 / st.lower_bound_bytes.max(1) as f64,
            st.naive_bytes,
            st.in_place_kernels,
            st.weights_bytes,
            st.io_bytes
        )
    }
}

impl Report {
    /// Recomputes the floor times for another bandwidth (GB/s).
    pub fn with_bandwidth(mut self, gbps: f64) -> Report {
        self.bandwidth_gbps = gbps;
        for k in &mut self.kernels {
            k.floor_us = (k.bytes_read + k.bytes_written) as f64 / (gbps * 1e3);
        }
        self.floor_us = self.bytes_moved as f64 / (gbps * 1e3);
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes") + "\n"
    }

    /// Totals first, then one line per kernel, then every boundary with its reason.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let mb = |b: u64| b as f64 / 1e6;
        let _ = writeln!(s, "source nodes       {}", self.source_nodes);
        let _ = writeln!(s, "nodes after folding {}", self.graph_nodes);
        let _ = writeln!(
            s,
            "dispatches         {} ({:.2} per source node)",
            self.dispatches,
            self.dispatches as f64 / self.source_nodes.max(1) as f64
        );
        let _ = writeln!(
            s,
            "bytes moved        {:.3} MB fused, {:.3} MB unfused ({:.1}x less)",
            mb(self.bytes_moved),
            mb(self.unfused_bytes_moved),
            self.unfused_bytes_moved as f64 / self.bytes_moved.max(1) as f64
        );
        let _ = writeln!(s, "flops              {:.3} G", self.flops as f64 / 1e9);
        let _ = writeln!(s, "bandwidth floor    {:.2} us at {} GB/s", self.floor_us, self.bandwidth_gbps);
        if let Some(w) = &self.weights {
            let _ = writeln!(
                s,
                "weights            {:.3} MB -> {:.3} MB as {}{} ({} tensors; largest relative RMS error {:.2e})",
                mb(w.bytes_before),
                mb(w.bytes_after),
                w.format,
                if w.format == "f16" { String::new() } else { format!(", blocks of {}", w.block) },
                w.tensors.len(),
                w.tensors.iter().map(|t| t.rel_rms_error).fold(0.0, f64::max)
            );
        }
        for r in &self.ranges {
            let _ = writeln!(
                s,
                "ranged dim         {} in {}..{}: {} of {} kernels dispatch fewer workgroups below {} (totals at {})",
                r.name,
                r.min,
                r.max,
                r.scaled_kernels,
                self.kernels.len(),
                r.max,
                r.max
            );
        }
        if let Some(last) = self.buckets.last() {
            let _ = writeln!(
                s,
                "buckets            {} (each compiled for its own values; kernels and totals below are {}..{}'s):",
                self.buckets.len(),
                last.min,
                last.max
            );
            for b in &self.buckets {
                let _ = writeln!(
                    s,
                    "  {:>6}..{:<6}   {} dispatches, {} dispatch fewer workgroups below {}",
                    b.min, b.max, b.dispatches, b.scaled_kernels, b.max
                );
            }
        }
        let _ = writeln!(s, "\nkernels:");
        let _ = writeln!(
            s,
            "  {:>4}  {:>10}  {:>10}  {:>12}  {:>9}  nodes",
            "#", "read B", "written B", "flops", "floor us"
        );
        for (i, k) in self.kernels.iter().enumerate() {
            let nodes: Vec<String> = k.nodes.iter().map(|n| format!("{} ({})", n.name, n.op)).collect();
            let _ = writeln!(
                s,
                "  {:>4}  {:>10}  {:>10}  {:>12}  {:>9.3}  {}",
                i,
                k.bytes_read,
                k.bytes_written,
                k.flops,
                k.floor_us,
                nodes.join(" + ")
            );
        }
        if !self.folded.is_empty() {
            let names: Vec<String> = self.folded.iter().map(|n| format!("{} ({})", n.name, n.op)).collect();
            let _ = writeln!(s, "\nfolded into their readers' index math: {}", names.join(", "));
        }
        let m = &self.memory;
        let _ = writeln!(s, "\nmemory: {}", m.summary());
        // A timeline: one row per buffer, one column per dispatch step (scaled to 64 columns), the character
        // showing how full the buffer is at that step (' ' empty … '@' full).
        let cols = m.steps.clamp(1, 64);
        const SHADES: &[char] = &[' ', '.', ':', '-', '=', '+', '*', '#', '%', '@'];
        for b in &m.buffers {
            // Per column, the fullest step among those it covers.
            let live = (0..cols).map(|col| {
                let (s0, s1) = (col * m.steps / cols, ((col + 1) * m.steps / cols).max(col * m.steps / cols + 1));
                (s0..s1)
                    .map(|s| b.values.iter().filter(|v| v.first <= s && s <= v.last).map(|v| v.bytes).sum::<u64>())
                    .max()
                    .unwrap_or(0)
            });
            let row: Vec<char> = live
                .map(|l| {
                    SHADES[((l * (SHADES.len() as u64 - 1)).div_ceil(b.bytes.max(1)) as usize).min(SHADES.len() - 1)]
                })
                .collect();
            let _ = writeln!(
                s,
                "  {:>10} B  {}  {} ({} values)",
                b.bytes,
                row.iter().collect::<String>(),
                b.name,
                b.values.len()
            );
        }
        let _ = writeln!(s, "\nkernel boundaries ({}):", self.boundaries.len());
        for b in &self.boundaries {
            let _ = writeln!(
                s,
                "  {} ({}) -> {} ({}) via '{}', {} B: {}",
                b.producer.name, b.producer.op, b.consumer.name, b.consumer.op, b.value, b.bytes, b.reason
            );
        }
        s
    }

    /// One offline HTML file: the kernels drawn as boxes holding their fused nodes, in dispatch order, with the
    /// boundaries between them as arrows (hover for the reason), then the tables.
    pub fn to_html(&self) -> String {
        use std::fmt::Write;
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        let mut kernel_of = std::collections::HashMap::new();
        for (i, k) in self.kernels.iter().enumerate() {
            for n in &k.nodes {
                kernel_of.insert(n.name.clone(), i);
            }
        }
        let (bw, lh, gap, x0) = (520.0, 16.0, 18.0, 40.0);
        let mut ys = Vec::new();
        let mut y = 20.0;
        for k in &self.kernels {
            let h = 26.0 + lh * k.nodes.len() as f64;
            ys.push((y, h));
            y += h + gap;
        }
        let height = y + 20.0;
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='{height}' font-family='monospace' font-size='12'>"
        );
        svg += "<defs><marker id='a' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' markerHeight='6' orient='auto'><path d='M0,0L10,5L0,10z' fill='#c33'/></marker></defs>";
        for (i, k) in self.kernels.iter().enumerate() {
            let (y, h) = ys[i];
            let fill = if k.nodes.len() > 1 { "#e6f2e6" } else { "#f2f2f2" };
            let _ = write!(
                svg,
                "<g><title>{}: {} B read, {} B written, {} flops</title><rect x='{x0}' y='{y}' width='{bw}' height='{h}' rx='6' fill='{fill}' stroke='#555'/>",
                esc(&k.name),
                k.bytes_read,
                k.bytes_written,
                k.flops
            );
            let _ =
                write!(svg, "<text x='{}' y='{}' font-weight='bold'>#{i} {}</text>", x0 + 8.0, y + 16.0, esc(&k.wgsl));
            for (j, n) in k.nodes.iter().enumerate() {
                let _ = write!(
                    svg,
                    "<text x='{}' y='{}'>{} ({})</text>",
                    x0 + 16.0,
                    y + 32.0 + lh * j as f64,
                    esc(&n.name),
                    esc(&n.op)
                );
            }
            svg += "</g>";
        }
        for (j, b) in self.boundaries.iter().enumerate() {
            let (Some(&p), Some(&c)) = (kernel_of.get(&b.producer.name), kernel_of.get(&b.consumer.name)) else {
                continue;
            };
            let (py, ph) = ys[p];
            let (cy, _) = ys[c];
            let xr = x0 + bw;
            let bend = xr + 30.0 + (j % 12) as f64 * 16.0;
            let _ = write!(
                svg,
                "<path d='M{xr},{} C{bend},{} {bend},{} {xr},{}' fill='none' stroke='#c33' stroke-width='1.2' marker-end='url(#a)'><title>{} → {}: {}</title></path>",
                py + ph / 2.0,
                py + ph / 2.0,
                cy + 14.0,
                cy + 14.0,
                esc(&b.producer.name),
                esc(&b.consumer.name),
                esc(&b.reason)
            );
        }
        svg += "</svg>";

        let mut h = String::from("<!doctype html><html><head><meta charset='utf-8'><title>wgslc fusion report</title><style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}</style></head><body>");
        let _ = write!(
            h,
            "<h1>wgslc fusion report</h1><p>{} source nodes → {} dispatches ({:.2} per node). Bytes moved: {} fused vs {} unfused. Floor: {:.2} µs at {} GB/s. Green boxes are fused kernels; red arrows are kernel boundaries (hover for the reason).</p>",
            self.source_nodes,
            self.dispatches,
            self.dispatches as f64 / self.source_nodes.max(1) as f64,
            self.bytes_moved,
            self.unfused_bytes_moved,
            self.floor_us,
            self.bandwidth_gbps
        );
        h += &svg;
        h += "<h2>Kernels</h2><table><tr><th>#</th><th>WGSL</th><th>nodes</th><th>read B</th><th>written B</th><th>flops</th><th>floor µs</th></tr>";
        for (i, k) in self.kernels.iter().enumerate() {
            let nodes: Vec<String> = k.nodes.iter().map(|n| format!("{} ({})", esc(&n.name), esc(&n.op))).collect();
            let _ = write!(
                h,
                "<tr><td class=n>{i}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.3}</td></tr>",
                esc(&k.wgsl),
                nodes.join("<br>"),
                k.bytes_read,
                k.bytes_written,
                k.flops,
                k.floor_us
            );
        }
        h += "</table><h2>Kernel boundaries</h2><table><tr><th>producer</th><th>consumer</th><th>value</th><th>bytes</th><th>why not fused</th></tr>";
        for b in &self.boundaries {
            let _ = write!(
                h,
                "<tr><td>{} ({})</td><td>{} ({})</td><td>{}</td><td class=n>{}</td><td>{}</td></tr>",
                esc(&b.producer.name),
                esc(&b.producer.op),
                esc(&b.consumer.name),
                esc(&b.consumer.op),
                esc(&b.value),
                b.bytes,
                esc(&b.reason)
            );
        }
        h += "</table>";
        // The memory picture: per buffer, dispatch steps across and byte offsets down, each value a box over its
        // lifetime and its bytes.
        let m = &self.memory;
        let _ = write!(h, "<h2>Memory</h2><p>{}.</p>", esc(&m.summary()));
        let (cw, bh) = (720.0 / m.steps.max(1) as f64, 160.0);
        let _ = write!(
            h,
            "<svg xmlns='http://www.w3.org/2000/svg' width='960' height='{}' font-family='monospace' font-size='11'>",
            20.0 + (bh + 10.0) * m.buffers.len() as f64
        );
        for (i, b) in m.buffers.iter().enumerate() {
            let y0 = 10.0 + (bh + 10.0) * i as f64;
            let scale = bh / b.bytes.max(1) as f64;
            let _ = write!(
                h,
                "<text x='0' y='{}'>{} ({} B)</text><rect x='220' y='{y0}' width='720' height='{bh}' fill='#f4f4f4'/>",
                y0 + 12.0,
                esc(&b.name),
                b.bytes
            );
            for v in &b.values {
                let _ = write!(
                    h,
                    "<rect x='{}' y='{}' width='{}' height='{}' fill='#6a9' stroke='#fff' stroke-width='0.5'><title>{}: {} B at {}, steps {}–{}</title></rect>",
                    220.0 + cw * v.first as f64,
                    y0 + scale * v.offset as f64,
                    (cw * (v.last - v.first + 1) as f64).max(1.0),
                    (scale * v.bytes as f64).max(1.0),
                    esc(&v.name),
                    v.bytes,
                    v.offset,
                    v.first,
                    v.last
                );
            }
        }
        h += "</svg></body></html>\n";
        h
    }
}
