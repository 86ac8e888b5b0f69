//! A depthwise convolution computed in the operand loads of the pointwise convolution that reads it (and with a
//! folded expansion, a whole inverted-residual block in one kernel).

use super::{is_depthwise_conv, is_pointwise_conv, lone_conv_chain, Fuse};
use crate::schedule::recipe::expand_tile;
use crate::schedule::{Fold, FoldKind, FoldedConv};
use wgslc_ir::Op;

/// The most output channels a pointwise Conv may have to take a depthwise Conv into its loads (`fuse_depthwise`).
/// Measured on MobileNetV2 (H100, median of five interleaved runs; lavapipe, two): no fold 0.716 ms / 713–732 ms,
/// up to 16 channels (1 fold) 0.732, up to 32 (6 folds) 0.738 / 747–754 ms, up to 64 (10) 0.846, all 17 folds
/// 1.231 / 858–869 ms. Beyond one or two tiles of channels, every tile recomputes the window sums inside a
/// product that is already load-bound, and the late 7x7 projections (K = 960) went from about 25 to 107 µs each.
/// Up to 32 the GPU time is within noise of the unfused kernels and each fold removes a dispatch, a write and a
/// re-read of the depthwise output, which is what a browser's per-dispatch cost pays for.
pub const DEPTHWISE_MAX_CHANNELS: usize = 32;

/// The most output channels a projection may have to take an expansion → depthwise pair into its kernel
/// (`fuse_depthwise`).
pub const PROJECT_MAX_CHANNELS: usize = 64;

/// Merges each depthwise Conv group (the Conv, then only scalar pointwise nodes) whose result only a pointwise
/// (1x1, unit stride) ungrouped Conv reads into that Conv's group as its `depthwise`: the depthwise output is
/// neither written nor re-read. Two kernels do it:
/// - A plain depthwise group becomes the product's B loads. The product computes a depthwise element (kh·kw
///   multiply-adds) once for every tile of output channels that loads it, at worst ⌈M/16⌉ tiles for M output
///   channels; the fold needs M ≤ [`DEPTHWISE_MAX_CHANNELS`] and that recomputation to stay within the M
///   multiply-adds the product itself spends on the element (kh·kw·(⌈M/16⌉ − 1) ≤ M): a 3x3 window always
///   passes, a 5x5 one up to 32 channels.
/// - A depthwise group that computes its own input (`expand`, from `fuse_expand`) becomes a whole inverted-residual
///   block in one kernel: each workgroup sums the projection of its tile over all expanded channels in registers
///   ([`expand_tile`]), which needs M ≤ [`PROJECT_MAX_CHANNELS`] (a wider projection would leave too few
///   workgroups or recompute the expansion for each slice of channels).
///
/// The merged group keeps the pointwise Conv's place.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    f.merge_into_later(|f, ci| {
        let c = &f.sched.kernels[ci];
        let pw = c.anchor.filter(|&a| is_pointwise_conv(g, a))?;
        if c.has(FoldKind::ConvSum) || c.has(FoldKind::Depthwise) {
            return None;
        }
        let x = g.node(pw).inputs[0]?;
        let (di, dw) = lone_conv_chain(f, x, pw)?;
        if di >= ci || !is_depthwise_conv(g, dw) {
            return None;
        }
        let Op::Conv { window: dwin, .. } = &g.node(dw).op else { return None };
        let khw: usize = dwin.kernel.iter().product();
        let os = &g.ty(g.node(pw).outputs[0]).shape;
        let m = os[1];
        let q = g.value(x).producer?;
        let d = &f.sched.kernels[di];
        if let Some(ex) = d.expand() {
            let e = g.ty(x).shape[1];
            let w = dwin;
            let tile = expand_tile(
                os[0],
                (os[2], os[3]),
                (w.kernel[0], w.kernel[1]),
                (w.strides[0], w.strides[1]),
                (w.dilations[0], w.dilations[1]),
                g.ty(g.node(ex.conv).inputs[0]?).shape[1],
                e,
                Some(m),
            );
            if m > PROJECT_MAX_CHANNELS || tile.is_none() {
                let why = format!(
                    "expansion → depthwise Conv → projection: {m} output channels are more than one workgroup \
                         sums over all {e} expanded channels (at most {PROJECT_MAX_CHANNELS})"
                );
                f.reasons.insert((q, pw), why);
                return None;
            }
        } else if m > DEPTHWISE_MAX_CHANNELS || khw * (m.div_ceil(16) - 1) > m {
            let why = format!(
                "depthwise Conv → pointwise Conv: recomputing the {khw}-tap window for each of up to {} tiles of \
                     {m} output channels costs more than materializing",
                m.div_ceil(16)
            );
            f.reasons.insert((q, pw), why);
            return None;
        }
        let mut merged = c.with(Fold::Depthwise(FoldedConv { conv: dw, then: d.elementwise.clone() }));
        if let Some(ex) = d.expand() {
            merged.fold(Fold::Expand(ex.clone()));
        }
        f.fits(&merged).then_some((di, merged))
    });
}
