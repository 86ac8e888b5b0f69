//! The decisions about how a kernel lays out its work, made once by the scheduler and only read by the emitter:
//! the product tiling, the tile of a folded expansion, the batch coordinates of a product, the store
//! permutation of a folded Transpose.

use super::group::{AnchorKind, KernelGroup};
use super::reads::mm_batch_refinement;
use wgslc_ir::{contiguous_strides, Graph, NodeId, Op};

/// How a kernel lays out its work ([`recipe`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recipe {
    /// For products (MatMul, Gemm, ungrouped Conv as implicit GEMM): how the output is cut into workgroups.
    pub product: Option<ProductTiling>,
    /// For a MatMul or Gemm: the product has one row of A per batch, so it runs as a matrix-vector product
    /// ([`gemv_tiling`]); for attention, one query row (the one-row attention kernel).
    pub one_row: bool,
    /// For a MatMul: the finer batch coordinates both operands are read over ([`mm_batch_refinement`]).
    pub batch: Option<Vec<usize>>,
    /// For an attention kernel: its rows per workgroup and V staging ([`attention_tiling`]).
    pub attention: Option<AttentionTiling>,
    /// For a kernel with an expansion fold: its tile ([`expand_tile`]).
    pub expand: Option<ExpandTile>,
    /// For a kernel that stores through a permutation or into a Concat's output: where each element goes.
    pub store: Option<StorePlacement>,
}

/// Where a kernel stores result element `o` (row-major over the result's shape):
/// `offset + Σ ((o / stride) % extent) · out_stride` over `terms`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorePlacement {
    pub offset: usize,
    pub terms: Vec<(usize, usize, usize)>,
}

/// Where the result in input `slot` of Concat `c` goes in the Concat's output: its block along the axis at each
/// outer index (one term when the axis has no outer extent, as channels at batch 1).
pub fn concat_placement(g: &Graph, c: NodeId, slot: usize) -> Option<StorePlacement> {
    let node = g.node(c);
    let Op::Concat { axis } = node.op else { return None };
    let os = &g.ty(node.outputs[0]).shape;
    let a = usize::try_from(axis).ok().filter(|&a| a < os.len())?;
    let before: usize = node.inputs[..slot].iter().map(|v| v.map_or(0, |v| g.ty(v).shape[a])).sum();
    let is = &g.ty(node.inputs.get(slot).copied().flatten()?).shape;
    let row: usize = os[a + 1..].iter().product();
    let (inner_in, inner_out, outer) =
        (is[a..].iter().product::<usize>(), os[a..].iter().product(), os[..a].iter().product::<usize>());
    let mut terms = vec![(1, inner_in, 1)];
    if outer > 1 {
        terms.push((inner_in, outer, inner_out));
    }
    Some(StorePlacement { offset: before * row, terms })
}

/// How a product's output is cut into workgroups and threads ([`product_tiling`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductTiling {
    /// Output tile side.
    pub tile: usize,
    /// Columns of a slice's grid of threads.
    pub tg: usize,
    /// Rows of a slice's grid of threads: `tg`, or half of it (a workgroup of 128 threads, each with twice the rows
    /// of outputs).
    pub tgy: usize,
    /// Slices of `tg · tgy` threads, each taking `kc` of K.
    pub slices: usize,
    pub kc: usize,
    /// K per step through workgroup memory.
    pub ks: usize,
    /// Neighbouring outputs a thread holds along each side: 1 (a thread's rows and columns `tg` apart) or 4 (runs of
    /// four, `4·tg` apart, read from workgroup memory as `vec4`s; one slice only).
    pub vec: usize,
}

impl ProductTiling {
    /// Floats of one k-row of a staged tile: the tile, plus 4 when the tiles are read as `vec4`s (so that a
    /// transposed operand's stores, `ks` rows apart, fall in different banks).
    pub fn row_len(&self) -> usize {
        self.tile + if self.vec > 1 { 4 } else { 0 }
    }

    /// Floats of workgroup memory the product kernel declares.
    pub fn smem_len(&self) -> usize {
        let (s, ks, t) = (self.slices, self.ks, self.tile);
        (s * 2 * ks * self.row_len()).max((s - 1) * t * t).max(s * ks * self.row_len() + t)
    }

    /// `tile`-wide tiles over K = `k` computed by `slices` slices (1 of 16x16 threads, or 4 of 8x8 threads that each
    /// take a quarter of K), `vec` neighbouring outputs per side a thread, with the longest k-step (up to 16) that
    /// keeps [`MAX_LOADS_PER_STEP`]. `None` unless the slice's threads cover the tile in runs of `vec`. Used by
    /// [`product_tiling`], and by the emitter's `WGSLC_PRODUCT_TILING` knob (for measuring, and for the tests
    /// that run every layout).
    pub fn of(tile: usize, vec: usize, slices: usize, k: usize) -> Option<ProductTiling> {
        ProductTiling::of_threads(tile, vec, slices, 256, k)
    }

    /// [`ProductTiling::of`] in workgroups of `threads`: 256, or 128 in one slice of 8x16 threads (each thread
    /// twice the rows of outputs, K half as far a step).
    pub fn of_threads(tile: usize, vec: usize, slices: usize, threads: usize, k: usize) -> Option<ProductTiling> {
        let (tg, tgy) = match (slices, threads) {
            (1, 256) => (16, 16),
            (1, 128) => (16, 8),
            (4, 256) => (8, 8),
            _ => return None,
        };
        let ok = matches!(vec, 1 | 4)
            && matches!(tile, 16 | 32 | 64 | 128)
            && tile.is_multiple_of(tg * vec)
            && tile.is_multiple_of(tgy * vec);
        let ks = (MAX_LOADS_PER_STEP * tg * tgy / tile).min(16);
        ok.then(|| ProductTiling { tile, tg, tgy, slices, kc: k.div_ceil(slices).div_ceil(ks) * ks, ks, vec })
    }

    /// Threads of a workgroup.
    pub fn threads(&self) -> usize {
        self.slices * self.tg * self.tgy
    }
}

/// Below this many 32x32 tiles, a product with K to spare runs 16x16 tiles in four K-slices instead (2x2 outputs per
/// thread): more workgroups for products with few output tiles (ResNet-18's late convolutions, 512 x 49 over K =
/// 4608). Measured on an H100 with scalar reads (ms per inference, thresholds 0 / 64 / 128 / 256): ResNet-18 1.98 /
/// 1.33 / 1.31 / 1.31, GPT-2 5.28 / 5.30 / 5.03 / 5.05, BERT 5.22 / 5.23 / 5.05 / 5.01. Once the 32x32 tiles read
/// runs of four as `vec4`s, 96 of them beat the 16x16 ones (H200, µs: 128×3072×768 94.5 against 122.3,
/// 128×768×768 30.2 against 37.7) and 28 did not (32×4864×896 142.5 against 94.4): 128 → 64 took GPT-2 4.27 →
/// 3.97 ms, BERT 4.32 → 3.92, Llama 3.72 → 3.41, ResNet-18 unchanged (medians of three, interleaved).
pub const KSPLIT16_BELOW: usize = 64;

/// The most elements of A (and of B) one thread loads per k-step: beyond it SwiftShader's compiler blows up
/// ([`product_tiling`]).
pub const MAX_LOADS_PER_STEP: usize = 4;

/// The narrower side from which a product with 256 tiles of 128 takes them: below it, 64x64 tiles of `vec4` reads
/// were faster (H200, µs, `scripts/gemm_micro.py`, 64x64 against 128x128): 512×896×9728 315.9 / 415.7,
/// 512×2048×9728 699.8 / 866.0, 1024×896×9728 586.8 / 617.9; at 2048³ 568.6 / 448.9, at 4096³ the 128x128 tiles
/// reach 79 % of `torch.mm`.
pub const TILE128_FROM: usize = 2048;

/// The SMs of the large GPUs the layouts are tuned on (an H100 or H200 has 132), for [`fills_waves`].
pub const WAVE_WORKGROUPS: usize = 132;

/// Whether `workgroups` 64x64 tiles (256 threads each) fill at least 80 % of the waves they need on a GPU of
/// [`WAVE_WORKGROUPS`] SMs, one tile per SM at a time: there they beat 32x32 tiles in four K-slices, which are
/// more workgroups but each reads twice the bytes per multiply-add; just past a wave, half the SMs idle through
/// the last one and they lose. H200, µs (`scripts/gemm_micro.py`, 64x64 against 32x32 in four slices): 112
/// tiles 512×4864×896 196.1 / 242.0, 512×896×896 45.6 / 52.9; 224 tiles 1024×4864×896 348.1 / 417.3,
/// 1024×896×896 74.8 / 86.5; but 140 tiles 640×896×896 73.1 / 67.4, 144 768×768×768 63.7 / 59.0, 96
/// 384×4864×1024 196.2 / 186.1, 72 128×768×2304 39.7 / 39.2.
pub fn fills_waves(workgroups: usize) -> bool {
    workgroups * 5 >= workgroups.div_ceil(WAVE_WORKGROUPS) * WAVE_WORKGROUPS * 4
}

/// The shape of work for an M×N product over K, `batches` times:
/// - 128x128 tiles, 8x8 outputs per thread in runs of four read as `vec4`s (K 8 at a time), when they give at
///   least 256 workgroups and both sides are at least [`TILE128_FROM`]; else 64x64 tiles, 4x4 outputs per thread
///   in one run of four a side, when those give 256 workgroups or, over K of 256 or more, [`fills_waves`].
///   H200, fp32, one product alone (`scripts/gemm_micro.py`, µs; 64x64 tiles of scalar reads before): 4096³ 10,129 →
///   64x64 `vec4` 7,044 → 128x128 4,671 (29.4 TFLOP/s; `torch.mm` 49.3 with TF32 off), 2048³ 1,304 → 924 → 611,
///   512×896×4864 385 → 282 → 287;
/// - else, with K to spare, 32x32 (4x4 per thread, one run of four a side) or, below [`KSPLIT16_BELOW`] such
///   tiles, 16x16 tiles (2x2 per thread), computed by four slices of 64 threads that each take a quarter of K (short
///   sequences and small images would otherwise leave most of a large GPU idle or run one output per thread). The
///   32x32 tiles' runs read as `vec4`s: 128×3072×768 99.2 → 94.5 µs, 128×768×3072 64.3 → 51.8, 128×768×768
///   32.1 → 30.2 (H200);
/// - else the largest smaller tile that gives 256 workgroups.
///
/// Tiles are no wider than the product's narrower side rounded up to 16, 32 or 64: a matrix-vector product (one
/// row, an LM head of 32000×768) took 0.300 ms in 64x64 tiles and 0.213 ms in 16x16 ones on an H100 (medians of
/// five).
///
/// K goes through workgroup memory 16 at a time, except in 128x128 tiles and in 32x32 tiles of four slices, which
/// step by 8 so that each thread loads at most 4 elements of A and 4 of B per step (as in every other tiling): with
/// 8 each, SwiftShader's shader compiler (Chrome's WebGPU without a GPU) ran for minutes and grew to gigabytes until
/// Chrome's GPU process died, while the same kernel with 4 compiled in under 3 s ([`MAX_LOADS_PER_STEP`]).
pub fn product_tiling(m: usize, nn: usize, k: usize, batches: usize) -> ProductTiling {
    let wgs = |t: usize| nn.div_ceil(t) * m.div_ceil(t) * batches;
    // No wider tile than the product's narrow side needs: a 64-wide tile over one row multiplies 63 rows of zeros.
    let cap = match m.min(nn) {
        0..=16 => 16,
        17..=32 => 32,
        33..=64 => 64,
        _ => 128,
    };
    let (tile, vec, slices) = if cap >= 128 && wgs(128) >= 256 && m.min(nn) >= TILE128_FROM {
        (128, 4, 1)
    } else if cap >= 64 && (wgs(64) >= 256 || k >= 256 && fills_waves(wgs(64))) {
        (64, 4, 1)
    } else if cap >= 32 && k >= 256 && wgs(32) >= KSPLIT16_BELOW {
        (32, 4, 4)
    } else if k >= 256 {
        (16, 1, 4)
    } else {
        ([32usize, 16].into_iter().filter(|&t| t <= cap).find(|&t| wgs(t) >= 256).unwrap_or(16), 1, 1)
    };
    ProductTiling::of(tile, vec, slices, k).expect("a tiling of 16 to 128 in one or four slices")
}

/// How a matrix-vector product (one row of A) lays out its work ([`gemv_tiling`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvTiling {
    /// B's columns are contiguous (its K stride is 1): each group of lanes owns one output and walks K.
    /// Otherwise B's rows are contiguous: the lanes own neighbouring outputs and each group walks a share of K.
    pub kmajor: bool,
    /// Neighbouring threads that read neighbouring elements of B.
    pub lanes: usize,
    /// 256 / `lanes`.
    pub groups: usize,
    /// Outputs per workgroup: `groups` when K-major, else `lanes · vec`.
    pub cols: usize,
    /// Row-major B read four columns at a time (`vec4<f32>` loads: four times the bytes in flight per load), or
    /// one.
    pub vec: usize,
}

/// Workgroups a matrix-vector product should reach to fill a large GPU (two per SM of an H100) before it trades
/// coalescing width for more of them.
pub const GEMV_WORKGROUPS: usize = 264;

/// What kind of adapter the kernels are shaped for (`--target`).
///
/// - `Gpu` (the default): many workgroups of 256 threads that cooperate through workgroup memory and barriers, as
///   a GPU's SMs hide latency with them.
/// - `Cpu`: a CPU implementation of WebGPU or Vulkan (SwiftShader, what Chrome gives a machine without a usable
///   GPU; Mesa's lavapipe). Such a driver runs a workgroup on one core, its invocations a few SIMD lanes at a time,
///   and a barrier switches every group of lanes in and out (coroutines), so a barrier costs far more than a read
///   and a few workgroups fill the machine. Matrix-vector products keep each output's sum over K in at most 4
///   threads ([`gemv_tiling`]), B stays in its stored layout (no K-major copy), no product is split along K across
///   workgroups, and attention and inverted-residual blocks default to a kernel per op (barriers over a handful
///   of keys, recomputed borders: a CPU pays their full price).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Target {
    #[default]
    Gpu,
    Cpu,
}

/// The layout of a one-row product over `nn` outputs and K = `k`, `batches` times, reading B in its layout: a
/// memory-bound kernel, so everything is about reading B once, coalesced, with enough workgroups in flight.
/// K-major B (an LM head tied to its embedding table, Gemm's transB): as few lanes per output as keep whole
/// 128-byte lines per warp (32) when that gives [`GEMV_WORKGROUPS`], else more lanes and fewer outputs per
/// workgroup, down to one output per workgroup; lanes never exceed K rounded up to a power of two. Row-major B
/// (a Linear's weight as exporters store it): the widest run of neighbouring outputs (64 down to 8, the 32-byte
/// sector) that gives enough workgroups, the rest of the 256 threads splitting K. With `vec4` (B's rows and
/// offset in whole `vec4`s) each lane reads four neighbouring outputs at once, down to two lanes (the 32-byte
/// sector): a down projection (896 outputs over K = 4864) then keeps four times the bytes in flight.
pub fn gemv_tiling(nn: usize, k: usize, batches: usize, kmajor: bool, vec4: bool, target: Target) -> GemvTiling {
    if target == Target::Cpu {
        return cpu_gemv_tiling(nn, k, batches, kmajor, vec4);
    }
    let wgs = |cols: usize| nn.div_ceil(cols) * batches;
    if kmajor {
        let max_lanes = k.next_power_of_two().clamp(32, 256);
        let lanes = [32usize, 64, 128, 256]
            .into_iter()
            .filter(|&l| l <= max_lanes)
            .find(|&l| wgs(256 / l) >= GEMV_WORKGROUPS)
            .unwrap_or(max_lanes);
        GemvTiling { kmajor, lanes, groups: 256 / lanes, cols: 256 / lanes, vec: 1 }
    } else {
        let (vec, widths): (usize, &[usize]) = if vec4 { (4, &[16, 8, 4, 2]) } else { (1, &[64, 32, 16, 8]) };
        let narrowest = *widths.last().expect("widths");
        let lanes = widths.iter().copied().find(|&l| wgs(l * vec) >= GEMV_WORKGROUPS).unwrap_or(narrowest);
        GemvTiling { kmajor, lanes, groups: 256 / lanes, cols: lanes * vec, vec }
    }
}

/// The most workgroups a matrix-vector product aims for on [`Target::Cpu`]: a CPU driver runs one workgroup per
/// core, and each workgroup costs a fixed price for its 256 invocations whatever their work.
pub const CPU_GEMV_WORKGROUPS: usize = 8;

/// Multiply-adds that pay for a workgroup of their own on [`Target::Cpu`].
pub const CPU_GEMV_MACS_PER_WORKGROUP: usize = 1 << 19;

/// [`gemv_tiling`] for [`Target::Cpu`]: each output's sum over K in as few threads as give the product one
/// workgroup per [`CPU_GEMV_MACS_PER_WORKGROUP`] multiply-adds (at most [`CPU_GEMV_WORKGROUPS`]), and never more
/// than 4 (their partial sums meet after the one barrier every layout has; 8 or more added workgroups of idle
/// invocations, and a reduction tree). Row-major B: the 256 threads own 256/groups neighbouring outputs (four each
/// with `vec4`), the groups splitting K; K-major B: 256/lanes outputs, their lanes splitting K.
///
/// Measured on SwiftShader and lavapipe (2 cores; `wgslc bench`, ms, GPU layout against this): one-row products of
/// K × N = 4864 × 896 81.3 / 16.9 → 10.4 / 12.6–14.6, 896 × 1152 43.5 / 3.85 → 3.9 / 0.84–1.8, 128 × 512 32.6 / 2.19
/// → 0.6–1.2 / 0.14–0.25; the tiny testdata Llama's decode step on SwiftShader through wgslc.js 4.5 → 44 tok/s.
/// 8 groups a workgroup lost (the Llama 44 → 29 tok/s).
fn cpu_gemv_tiling(nn: usize, k: usize, batches: usize, kmajor: bool, vec4: bool) -> GemvTiling {
    const MAX_SPLIT: usize = 4;
    let goal = (nn * k * batches / CPU_GEMV_MACS_PER_WORKGROUP).clamp(1, CPU_GEMV_WORKGROUPS);
    let wgs = |cols: usize| nn.div_ceil(cols) * batches;
    let split = |cols_of: &dyn Fn(usize) -> usize| {
        [1usize, 2, 4].into_iter().find(|&s| wgs(cols_of(s)) >= goal).unwrap_or(MAX_SPLIT)
    };
    if kmajor {
        let lanes = split(&|l| 256 / l);
        return GemvTiling { kmajor, lanes, groups: 256 / lanes, cols: 256 / lanes, vec: 1 };
    }
    let vec = if vec4 { 4 } else { 1 };
    let groups = split(&|g| 256 / g * vec);
    let lanes = 256 / groups;
    GemvTiling { kmajor, lanes, groups, cols: lanes * vec, vec }
}

/// How a one-row product over a narrow K-major B lays out its work ([`packed_gemv_tiling`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedGemvTiling {
    /// Lanes of a group, walking the words of its columns' rows side by side.
    pub lanes: usize,
    /// 256 / `lanes`.
    pub groups: usize,
    /// Columns each group owns: every word of A's row read (from workgroup memory) serves all of them.
    pub per_group: usize,
    /// Outputs per tile: `groups · per_group`.
    pub cols: usize,
    /// Tiles of `cols` outputs a workgroup computes one after another, A staged once and each next tile's loads of
    /// B in flight while the current one is reduced (1 unless A is staged whole).
    pub tiles: usize,
}

impl PackedGemvTiling {
    /// The layout of `lanes` lanes a group (a power of two up to 256), `per_group` columns each.
    pub fn new(lanes: usize, per_group: usize) -> PackedGemvTiling {
        let groups = 256 / lanes;
        PackedGemvTiling { lanes, groups, per_group, cols: groups * per_group, tiles: 1 }
    }

    /// Outputs per workgroup: `cols · tiles`.
    pub fn workgroup_cols(&self) -> usize {
        self.cols * self.tiles
    }
}

/// The layout of a one-row product over `nn` outputs of a narrow K-major B (each output's weights one stored row,
/// read in loads of up to 16 bytes) over K = `k`, of which `staged` elements of A sit in workgroup memory at a
/// time: a load of codes is a few bytes of B against up to 32 elements of A, so A, staged once per workgroup in
/// workgroup memory, is what the kernel reads most, and a workgroup's latency (staging, a barrier, the loads of B,
/// the reduction) is what it costs. Measured over the Qwen2.5-0.5B shapes (scripts/gemv_micro.py alone, then
/// scripts/decode_ab.py in the decoder; docs/performance.md):
/// - a K longer than one staged chunk (a down projection's 4864): 64 lanes a column, 2 columns a group (H200, the
///   4-bit decoder: 847 → 875 tok/s against 32 × 1; alone 16.6 → 14.6 µs), though that leaves fewer than
///   [`GEMV_WORKGROUPS`] (112 for 896 outputs): the lanes' shorter runs over K pay more than the workgroups;
/// - a short K (A staged whole, with room for the sums) and outputs enough for a workgroup per SM at 64 a
///   workgroup: 16 lanes, 2 columns a group — gate/up's 9728 and an LLM head's 151,936. Once A's staging was free
///   of bank conflicts (thirty-first session) 2 columns beat 4 (H100, the 4-bit decoder: 1,056.6 → 1,101.9 tok/s;
///   gate/up alone 13.4 → 12.0 µs, the head 65.8 → 65.5); before it 4 columns had won (gate/up alone 15.5 → 14.4
///   µs against 32 × 4; the head in the decoder 71 µs against 94 at 32 × 4);
/// - else 32 lanes a column, 4 columns a group where that still gives [`GEMV_WORKGROUPS`], then 2, then 1 (more
///   lanes and fewer columns a workgroup were slower at K = 896).
///
/// Where A is staged whole and the outputs would still give 4 × [`GEMV_WORKGROUPS`] workgroups, a workgroup
/// computes 4 (else 2) tiles of its columns one after another, A staged once and each next tile's loads of B in
/// flight during the current tile's sums (the 4-bit head of 151,936 outputs alone on the H200: 59.7 → 55.8 µs; the
/// 4-bit decoder 1,154 → 1,160 tok/s).
///
/// `per_group` divides `block_cols` (the columns of a weight split into blocks, so that no group straddles two).
pub fn packed_gemv_tiling(nn: usize, block_cols: Option<usize>, k: usize, staged: usize) -> PackedGemvTiling {
    let wgs = |cols: usize| nn.div_ceil(cols);
    let fits = |c: usize| block_cols.is_none_or(|b| b % c == 0);
    let tiling = PackedGemvTiling::new;
    if k > staged && fits(2) {
        return tiling(64, 2);
    }
    if fits(2) && staged <= 1024 && wgs(64) >= GEMV_WORKGROUPS / 2 {
        let mut t = tiling(16, 2);
        // Outputs enough for 4 × GEMV_WORKGROUPS workgroups of several tiles: an LLM head.
        if let Some(tiles) =
            [4, 2].into_iter().find(|&n| block_cols.is_none() && wgs(t.cols * n) >= 4 * GEMV_WORKGROUPS)
        {
            t.tiles = tiles;
        }
        return t;
    }
    let per_group = [4usize, 2].into_iter().find(|&c| fits(c) && wgs(8 * c) >= GEMV_WORKGROUPS).unwrap_or(1);
    tiling(32, per_group)
}

/// How an attention kernel lays out its work ([`attention_tiling`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionTiling {
    /// Query rows per workgroup, in lanes of 16: 1 or 2.
    pub row_lanes: usize,
    /// Keys of V staged in workgroup memory at a time.
    pub v_chunk: usize,
}

/// The attention kernel's layout for `batches` × `m` query rows and value rows `dv` wide. 32 rows per workgroup
/// (each K and V load serves twice the rows) when that still gives a workgroup per SM of a large GPU (132 on an
/// H100) and the accumulators stay few; else 16. On the H100 this took GPT-2 at 1024 tokens from 32.0 to 28.5 ms.
/// V is staged a power of two of keys at a time, dividing the 64-key tile, within the K tile's 1088 floats.
pub fn attention_tiling(m: usize, batches: usize, dv: usize) -> AttentionTiling {
    let dv_pad = dv.div_ceil(16) * 16;
    let row_lanes = if batches * m.div_ceil(32) >= 132 && dv_pad <= 128 { 2 } else { 1 };
    let v_chunk = [16, 8, 4, 2, 1].into_iter().find(|&c| c * dv_pad <= 1088).unwrap_or(1);
    AttentionTiling { row_lanes, v_chunk }
}

/// The output channels of each group a grouped convolution needs to run as a product (implicit GEMM, one batch
/// of the product per image and group: [`grouped_conv_as_product`]) rather than directly, one output per thread.
pub const GROUPED_CONV_PRODUCT_MIN_ROWS: usize = 16;

/// A grouped convolution (not depthwise) with at least [`GROUPED_CONV_PRODUCT_MIN_ROWS`] output channels a group:
/// it runs as batched products over its groups, each group's weights A and its input channels' window B (as an
/// ungrouped one does over its one group). ResNeXt-style blocks, and the parts of a convolution split along K
/// (`split_k`).
pub fn grouped_conv_as_product(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let Op::Conv { group, .. } = &node.op else { return false };
    let Some(w) = node.inputs.get(1).copied().flatten() else { return false };
    *group > 1 && g.ty(w).shape[0] / group >= GROUPED_CONV_PRODUCT_MIN_ROWS
}

/// The anchor's kind, for the fold rules and the recipe.
pub fn anchor_kind(g: &Graph, k: &KernelGroup) -> AnchorKind {
    let Some(a) = k.anchor else { return AnchorKind::Elementwise };
    match &g.node(a).op {
        Op::MatMul => AnchorKind::MatMul,
        Op::Gemm { .. } => AnchorKind::Gemm,
        Op::Conv { .. } if super::rules::is_pointwise_conv(g, a) => AnchorKind::PointwiseConv,
        Op::Conv { .. } if super::rules::is_depthwise_conv(g, a) => AnchorKind::DepthwiseConv,
        Op::Conv { group: 1, .. } => AnchorKind::Conv,
        Op::CacheWrite { .. } => AnchorKind::CacheWrite,
        _ => AnchorKind::Other,
    }
}

/// The recipe of a final group; `None` where a fold's decision has no answer (a scheduler bug: the rule that
/// made the fold checked it).
pub fn recipe(g: &Graph, k: &KernelGroup) -> Option<Recipe> {
    let mut r = Recipe::default();
    if let Some(t) = k.store_copy() {
        r.store = Some(StorePlacement { offset: 0, terms: store_permutation(g, t)? });
    }
    if let Some((c, slot)) = k.write_into() {
        r.store = Some(concat_placement(g, c, slot)?);
    }
    let Some(a) = k.anchor else { return Some(r) };
    let node = g.node(a);
    if let Some(ex) = k.expand() {
        let dw = k.depthwise().map_or(a, |d| d.conv);
        let dn = g.node(dw);
        let Op::Conv { window: w, .. } = &dn.op else { return None };
        let os = &g.ty(dn.outputs[0]).shape;
        let e = g.ty(dn.inputs[0]?).shape[1];
        let cin = g.ty(g.node(ex.conv).inputs[0]?).shape[1];
        let project = k.depthwise().map(|_| g.ty(node.outputs[0]).shape[1]);
        r.expand = Some(expand_tile(
            os[0],
            (os[2], os[3]),
            (w.kernel[0], w.kernel[1]),
            (w.strides[0], w.strides[1]),
            (w.dilations[0], w.dilations[1]),
            cin,
            e,
            project,
        )?);
        return Some(r);
    }
    if let Some(t) = k.attention() {
        r.batch = mm_batch_refinement(g, a);
        let (qt, kt) = (g.ty(node.inputs[0]?), g.ty(node.inputs[1]?));
        let (rq, rk) = (qt.rank(), kt.rank());
        let batch = wgslc_ir::broadcast_shapes(&qt.shape[..rq.saturating_sub(2)], &kt.shape[..rk.saturating_sub(2)])?;
        let m = if rq < 2 { 1 } else { qt.shape[rq - 2] };
        let dv = *g.ty(g.node(t.pv).outputs[0]).shape.last()?;
        r.attention = Some(attention_tiling(m, batch.iter().product(), dv));
        r.one_row = m == 1;
        return Some(r);
    }
    match &node.op {
        Op::MatMul | Op::Gemm { .. } => {
            let (at, bt) = (g.ty(node.inputs[0]?), g.ty(node.inputs[1]?));
            let (m, kk, nn, batches) = match node.op {
                Op::Gemm { trans_a, trans_b, .. } => {
                    let (m, kk) = if trans_a { (at.shape[1], at.shape[0]) } else { (at.shape[0], at.shape[1]) };
                    (m, kk, if trans_b { bt.shape[0] } else { bt.shape[1] }, 1)
                }
                _ => {
                    let (ra, rb) = (at.rank(), bt.rank());
                    let (m, kk) = if ra == 1 { (1, at.shape[0]) } else { (at.shape[ra - 2], at.shape[ra - 1]) };
                    let nn = if rb == 1 { 1 } else { bt.shape[rb - 1] };
                    let (ab, bb) = (&at.shape[..ra.saturating_sub(2)], &bt.shape[..rb.saturating_sub(2)]);
                    let batches: usize = wgslc_ir::broadcast_shapes(ab, bb)?.iter().product();
                    r.batch = mm_batch_refinement(g, a);
                    (m, kk, nn, batches)
                }
            };
            r.product = Some(product_tiling(m, nn, kk, batches));
            r.one_row = m == 1;
        }
        Op::Conv { group, window } if *group == 1 || grouped_conv_as_product(g, a) => {
            let (xs, ws) = (&g.ty(node.inputs[0]?).shape, &g.ty(node.inputs[1]?).shape);
            let os = &g.ty(node.outputs[0]).shape;
            let mut kk = ws[1] * window.kernel.iter().product::<usize>();
            if let Some((c1, _)) = k.conv_sum() {
                let ws1 = &g.ty(g.node(c1).inputs[1]?).shape;
                kk += ws1[1] * ws1[2..].iter().product::<usize>();
            }
            r.product = Some(product_tiling(ws[0] / group, os[2..].iter().product(), kk, xs[0] * group));
        }
        _ => {}
    }
    Some(r)
}

/// How a kernel with a folded expansion (`KernelGroup::expand`) tiles its work: each workgroup of 256 threads
/// takes `ty`x`tx` output positions of one image, computes the expanded channels over their `hy`x`hx` input window
/// into workgroup memory `ec` channels at a time, and the depthwise outputs from there. With a projection, each
/// position has `lanes` threads holding `per_lane` output channels each, summed over all expanded channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpandTile {
    pub ty: usize,
    pub tx: usize,
    pub hy: usize,
    pub hx: usize,
    pub ec: usize,
    pub lanes: usize,
    pub per_lane: usize,
    /// Channels of the input window held in workgroup memory at a time: all `cin` (loaded once), or a slice that
    /// the expansion sums over before loading the next.
    pub x_chunk: usize,
}

/// Floats of workgroup memory (16 KiB, WebGPU's default limit).
pub const WORKGROUP_FLOATS: usize = 16384 / 4;

/// The most output channels one thread of a fused inverted-residual block accumulates (registers).
pub const PROJECT_MAX_PER_THREAD: usize = 16;

/// The tiling for a depthwise convolution over an `oh`x`ow` output (per image, `batch` images) whose input is an
/// expansion from `cin` to `e` channels computed in the kernel, projected to `project` output channels when set.
/// Tiles are 8x8, 4x4 or 2x2 positions whose window recomputes the expansion at most [`EXPAND_MAX_RECOMPUTE`]
/// times ((hy·hx)/(ty·tx·sy·sx): neighbouring windows overlap). The expansion reads its input window from
/// workgroup memory: all channels loaded once where that leaves room for as many expanded channels per step,
/// else 16 channels at a time.
/// - Without a projection, each step of at most 32 channels is a workgroup of its own: the largest tile that
///   still gives 32 workgroups, or else the smallest.
/// - With one, a workgroup walks all `e` channels in steps, one after another, each ending in barriers: the tile
///   with the fewest steps (on the H100 a step costs microseconds however little it computes), then the most
///   workgroups up to 128, then the least recomputation.
///
/// `None` when no tile passes, fits 16 KiB of workgroup memory and keeps a thread's accumulators within
/// [`PROJECT_MAX_PER_THREAD`].
#[allow(clippy::too_many_arguments)]
pub fn expand_tile(
    batch: usize,
    (oh, ow): (usize, usize),
    (kh, kw): (usize, usize),
    (sy, sx): (usize, usize),
    (dy, dx): (usize, usize),
    cin: usize,
    e: usize,
    project: Option<usize>,
) -> Option<ExpandTile> {
    // `x_chunk`: the whole window, or slices of 16 channels.
    let fit = |t: usize, whole: bool| {
        let (ty, tx) = (t.min(oh.max(1)), t.min(ow.max(1)));
        let (hy, hx) = ((ty - 1) * sy + (kh - 1) * dy + 1, (tx - 1) * sx + (kw - 1) * dx + 1);
        let recompute = (hy * hx) as f64 / (ty * tx * sy * sx) as f64;
        let x_chunk = if whole { cin } else { cin.min(16) };
        // Per expanded channel of a step: its window, and with a projection its depthwise outputs.
        let per_channel = hy * hx + project.map_or(0, |_| ty * tx);
        let room = WORKGROUP_FLOATS.checked_sub(x_chunk * hy * hx)?;
        let mut ec = (room / per_channel).min(e).min(if project.is_some() { e } else { EXPAND_STEP_CHANNELS });
        // With a projection, steps of equal size (no short last step), a multiple of 4 channels: the projection
        // reads its weights four expanded channels at a time.
        if project.is_some() && ec < e && ec >= 4 {
            let even = e.div_ceil(e.div_ceil(ec));
            ec = (even.div_ceil(4) * 4).min(ec - ec % 4);
        }
        let lanes = 256 / (ty * tx);
        let per_lane = project.map_or(0, |m| m.div_ceil(lanes));
        let tile = ExpandTile { ty, tx, hy, hx, ec, lanes, per_lane, x_chunk };
        let ok =
            ec > 0 && per_lane <= PROJECT_MAX_PER_THREAD && 256 % (ty * tx) == 0 && recompute <= EXPAND_MAX_RECOMPUTE;
        ok.then_some(tile)
    };
    let tiles = |t: &ExpandTile| batch * oh.div_ceil(t.ty) * ow.div_ceil(t.tx);
    let steps = |t: &ExpandTile| e.div_ceil(t.ec);
    // The whole window where that costs no steps.
    let fits: Vec<ExpandTile> = [8, 4, 2]
        .into_iter()
        .filter_map(|t| match (fit(t, true), fit(t, false)) {
            (Some(a), Some(b)) => Some(if steps(&a) <= steps(&b) { a } else { b }),
            (a, b) => a.or(b),
        })
        .collect();
    if project.is_none() {
        return fits.iter().find(|t| tiles(t) * steps(t) >= 32).or(fits.last()).copied();
    }
    fits.into_iter().min_by_key(|t| (steps(t), std::cmp::Reverse(tiles(t).min(128)), std::cmp::Reverse(t.ty * t.tx)))
}

/// The most an expansion folded into a depthwise kernel may be recomputed at tile borders (`fuse_expand`): 2x2
/// tiles of a 3x3 window (4x) pass. On the H100 the kernels are bound by how long each thread's chain of steps is,
/// not by arithmetic: allowing 2x2 tiles took MobileNetV2 with whole blocks fused from 1.53 to 1.30 ms.
pub const EXPAND_MAX_RECOMPUTE: f64 = 4.5;

/// Expanded channels per workgroup of an expansion → depthwise kernel without a projection. Measured on
/// MobileNetV2 (H100, 37 dispatches): 32 channels 1.13–1.16 ms, 16 0.98–1.06, 8 0.87–0.91, 4 1.02–1.04.
pub const EXPAND_STEP_CHANNELS: usize = 8;

/// For a StridedCopy `t` that permutes its input's dimensions (offset 0, each input dimension of extent > 1 read
/// with its contiguous stride by exactly one output dimension of the same extent), the store terms that place
/// input element `o` (flat, row-major) in the output: `Σ ((o / stride) % extent) · out_stride`.
pub fn store_permutation(g: &Graph, t: NodeId) -> Option<Vec<(usize, usize, usize)>> {
    let node = g.node(t);
    let Op::StridedCopy { offset: 0, strides } = &node.op else { return None };
    let v = node.inputs[0]?;
    let (vs, os) = (&g.ty(v).shape, &g.ty(node.outputs[0]).shape);
    if g.ty(v).numel() != g.ty(node.outputs[0]).numel() || g.ty(v).numel() == 0 {
        return None;
    }
    let (vcs, ocs) = (contiguous_strides(vs), contiguous_strides(os));
    let mut used = vec![false; os.len()];
    let mut terms = Vec::new();
    for d in (0..vs.len()).filter(|&d| vs[d] > 1) {
        let e = (0..os.len()).find(|&e| !used[e] && os[e] == vs[d] && strides[e] == vcs[d] as i64)?;
        used[e] = true;
        terms.push((vcs[d], vs[d], ocs[e]));
    }
    // Every output dimension of extent > 1 takes one input dimension.
    (0..os.len()).all(|e| used[e] || os[e] == 1).then_some(terms)
}
