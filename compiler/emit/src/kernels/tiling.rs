//! A tiled product's layout as templates/matmul.wgsl reads it: the scheduler's tiling (or the measuring knob's),
//! each thread's loads and outputs, and which operands are loaded a `vec4` at a time.

use super::*;
use wgslc_passes::Narrow;

/// A product's tiling ([`wgslc_passes::ProductTiling`]) as the matmul template reads it.
pub(super) struct Tiling {
    pub(super) tile: usize,
    pub(super) tg: usize,
    pub(super) slices: usize,
    pub(super) kc: usize,
    pub(super) ks: usize,
    pub(super) smem_len: usize,
    /// Tile elements each thread loads per k-step (A and B each), for unrolled loops: `off` is the element's
    /// offset from the thread's first (a slice's `tg · tgy` threads apart).
    pub(super) load_lanes: Vec<Lane>,
    /// A thread's outputs down its rows and along its columns: `off` from its first (`ly · vec`, `lx · vec`).
    pub(super) rlanes: Vec<OutLane>,
    pub(super) clanes: Vec<OutLane>,
    /// Neighbouring outputs a thread holds along a side (1 or 4), its runs of them down its rows and along its
    /// columns (`off` in `vec4`s from the thread's first), and the floats of one staged k-row.
    pub(super) vec: usize,
    pub(super) rruns: usize,
    pub(super) cruns: usize,
    /// Both sides' runs by index, a row run's read next to the column run's of the same index.
    pub(super) run_pairs: Vec<RunPair>,
    pub(super) row_len: usize,
    /// The vec4s of a tile's side and of a k-step (`tile / 4`, `ks / 4`), for operands loaded four at a time.
    pub(super) tile4: usize,
    pub(super) ks4: usize,
    /// With `vec4` reads: `vec4`s of workgroup memory, of one staged k-row, and the outputs between a thread's runs
    /// down its rows and along its columns.
    pub(super) smem_vec4s: usize,
    pub(super) row_vec4s: usize,
    pub(super) rrun_stride: usize,
    pub(super) crun_stride: usize,
    /// Rows of a slice's grid of threads (`tg` its columns), and threads of a workgroup.
    pub(super) tgy: usize,
    pub(super) threads: usize,
    /// Threads of a slice (`tg · tgy`); floats of a k-step's A tile (`tile · ks`) and of A's and B's (twice that).
    pub(super) slice_threads: usize,
    pub(super) step_len: usize,
    pub(super) steps_len: usize,
    /// Floats of an output tile (`tile²`); where the folded RMSNorm's row factors start (`slices · tile · ks`);
    /// the squares each row sums (`slices · ks`); and the slices after the first (`slices - 1`).
    pub(super) tile_len: usize,
    pub(super) rinv_at: usize,
    pub(super) ssq_terms: usize,
    pub(super) slices_after: usize,
}

impl From<wgslc_passes::ProductTiling> for Tiling {
    fn from(t: wgslc_passes::ProductTiling) -> Tiling {
        // A thread's load lanes are `tg · tgy` elements apart, so all of them load the same k of a step (the folded
        // RMSNorm's weights are read once a step for all).
        let slice_threads = t.tg * t.tgy;
        debug_assert!(slice_threads.is_multiple_of(t.ks));
        // A thread's outputs along a side whose grid has `tg` threads.
        let lanes = |tg: usize| -> Vec<OutLane> {
            (0..t.tile / tg)
                .map(|i| OutLane {
                    i,
                    off: i % t.vec + (i / t.vec) * tg * t.vec,
                    run: i / t.vec,
                    comp: ["x", "y", "z", "w"][i % t.vec],
                    col_off: None,
                })
                .collect()
        };
        let clanes = lanes(t.tg);
        let (rruns, cruns) = (t.tile / t.tgy / t.vec, t.tile / t.tg / t.vec);
        Tiling {
            tile: t.tile,
            tg: t.tg,
            slices: t.slices,
            kc: t.kc,
            ks: t.ks,
            smem_len: t.smem_len(),
            load_lanes: unrolled(t.tile * t.ks / slice_threads, slice_threads),
            rlanes: lanes(t.tgy)
                .into_iter()
                .map(|r| OutLane { col_off: clanes.get(r.i).map(|c| c.off), ..r })
                .collect(),
            clanes,
            vec: t.vec,
            rruns,
            cruns,
            run_pairs: (0..rruns.max(cruns))
                .map(|i| RunPair { i, r_off: (i < rruns).then_some(i * t.tgy), c_off: (i < cruns).then_some(i * t.tg) })
                .collect(),
            row_len: t.row_len(),
            tile4: t.tile / 4,
            ks4: t.ks / 4,
            smem_vec4s: t.smem_len().div_ceil(4),
            row_vec4s: t.row_len() / 4,
            rrun_stride: t.vec * t.tgy,
            crun_stride: t.vec * t.tg,
            tgy: t.tgy,
            threads: t.threads(),
            slice_threads,
            step_len: t.row_len() * t.ks,
            steps_len: t.row_len() * t.ks * 2,
            tile_len: t.tile * t.tile,
            rinv_at: t.slices * t.row_len() * t.ks,
            ssq_terms: t.slices * t.ks,
            slices_after: t.slices - 1,
        }
    }
}

/// Run `i` of a thread's outputs down its rows and along its columns, each where the side has that many: its
/// offset in `vec4`s from the thread's first.
pub(super) struct RunPair {
    pub(super) i: usize,
    pub(super) r_off: Option<usize>,
    pub(super) c_off: Option<usize>,
}

/// One of a thread's outputs along a side of a product's tile: `off` from the thread's first, and where it is
/// read from workgroup memory when the tiling reads `vec4`s: component `comp` of run `run`.
pub(super) struct OutLane {
    pub(super) i: usize,
    pub(super) off: usize,
    pub(super) run: usize,
    pub(super) comp: &'static str,
    /// A row lane's: the offset of the column lane of the same index, where the thread has one (its reads of A's
    /// and B's staged elements interleave).
    pub(super) col_off: Option<usize>,
}

impl Emitter<'_> {
    /// The product tiling the scheduler chose for `group` (K = `k`), or, where
    /// `WGSLC_PRODUCT_TILING=TILE,VEC[,SLICES[,THREADS]]` is set (for measuring, and for the tests that run every
    /// layout), that tiling instead ([`wgslc_passes::ProductTiling::of_threads`]).
    pub(super) fn product_tiling(&self, group: &KernelGroup, n: NodeId, k: usize) -> Result<Tiling, EmitError> {
        let t = group.recipe.product.ok_or_else(|| self.err(n, "a product without its tiling (a scheduler bug)"))?;
        if let Ok(knob) = std::env::var("WGSLC_PRODUCT_TILING") {
            // Every field a number: `128,x,4` is refused, not read as `128,4`.
            let v: Vec<usize> =
                knob.split(',').map(|x| x.trim().parse().ok()).collect::<Option<_>>().unwrap_or_default();
            let forced = match v[..] {
                [tile, vec] => wgslc_passes::ProductTiling::of(tile, vec, 1, k),
                [tile, vec, slices] => wgslc_passes::ProductTiling::of(tile, vec, slices, k),
                [tile, vec, slices, threads] => wgslc_passes::ProductTiling::of_threads(tile, vec, slices, threads, k),
                _ => None,
            };
            return forced.map(Tiling::from).ok_or_else(|| {
                self.err(n, format!("WGSLC_PRODUCT_TILING={knob:?} is not a tiling TILE,VEC[,SLICES[,THREADS]]"))
            });
        }
        Ok(t.into())
    }
}

/// Whether a tiled product's operand can be read a `vec4` at a time along its contiguous axis: one vec4 per thread a
/// k-step (the tiling's four elements a thread), the tile's extent along that axis (`ks` when `along_k`, else
/// `tile`) in whole vec4s, and every vec4 wholly inside or outside the operand: `(extent, step, contiguous)` are
/// the operand's length along its contiguous axis, its stride along the other axis and whether the contiguous
/// axis has stride 1; the element offset and batch strides must be whole vec4s too, and a narrow operand must have
/// a four-wide loader (float16 and bfloat16; block-quantized ones do not). `WGSLC_PRODUCT_LOADS=scalar` turns it
/// off, for measuring.
///
/// Only in tiles of up to 64 (H200, µs, `scripts/gemm_micro.py`, vec4 against scalar loads): 64x64 tiles
/// 512×896×4864 166.2 / 174.0, 512×4864×896 196.0 / 229.1, 512×896×1152 72.8 / 79.3, 4096³ 4,309 / 4,403; four
/// slices of 32x32 216.3 / 220.9, 240.2 / 248.1; but 128x128 tiles slower (215.9 / 208.8, 4096³ 3,701 / 3,397, the
/// 512-token prefill's RMSNorm-folded gate/up 0.502 / 0.381 ms). A K-major B (Gemm's transB) stays scalar: its
/// vec4s along K were slower in every tiling (64x64 512×4864×896 253.9 / 220.4); and the product then reads A in
/// vec4s only where B is read so too: A alone (a K-major B) was slower at every shape (32×896×4864 35.9 / 32.4,
/// 512×4864×896 264.5 / 255.8), B alone (A normalized as it is staged) as often slower as faster (128×3072×768
/// 74.2 / 68.5, 512×4864×896 325.5 / 279.7, 32×4864×896 57.9 / 64.8), both faster at all but one shape
/// (128×3072×768 45.1 / 49.0, 512×896×4864 166.5 / 174.2, 512×4864×896 241.5 / 248.5, 32×896×4864 35.0 / 34.3).
/// A folded RMSNorm's A is read so too (its vec4 scaled by four of the norm's weights as it is staged, its squares
/// summed as a vec4): 512×896×9728 in 64x64 tiles 346.1 / 365.3, 512×896×1152 in four slices of 32x32 72.3 / 78.1.
pub(super) fn vec4_loads(
    t: &Tiling,
    (extent, step, contiguous): (usize, i64, bool),
    along_k: bool,
    offset: i64,
    batch_strides: &[i64],
    narrow: Option<Narrow>,
) -> bool {
    let knob_off = std::env::var("WGSLC_PRODUCT_LOADS").is_ok_and(|v| v == "scalar");
    !knob_off
        && t.load_lanes.len() == 4
        && t.tile <= 64
        && (if along_k { t.ks } else { t.tile }).is_multiple_of(4)
        && contiguous
        && extent.is_multiple_of(4)
        && step % 4 == 0
        && offset % 4 == 0
        && batch_strides.iter().all(|s| s % 4 == 0)
        && !matches!(narrow, Some(Narrow::Blocks(_)))
}
