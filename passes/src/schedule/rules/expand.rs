//! A pointwise expansion computed over each output tile's window inside the depthwise convolution that reads it.

use super::{is_depthwise_conv, is_pointwise_conv, lone_conv_chain, Fuse};
use crate::schedule::recipe::{expand_tile, EXPAND_MAX_RECOMPUTE};
use crate::schedule::{Fold, FoldedConv};
use wgslc_ir::Op;

/// Merges each pointwise Conv group (the Conv, then only scalar pointwise nodes) whose result only a depthwise
/// Conv reads into that Conv's group as its `expand`: the depthwise kernel computes the expanded channels over each
/// output tile's input window in workgroup memory ([`expand_tile`]), so the expansion (6x the block's channels in
/// MobileNetV2) is never written or re-read. Windows overlap between tiles, so the expansion is recomputed at the
/// tile borders: (hy·hx)/(ty·tx·sy·sx) times, 1.6x for 3x3 over 8x8 tiles, 2.3x over 4x4 tiles; the fold is
/// taken when a tile keeps that within [`EXPAND_MAX_RECOMPUTE`]. The merged group keeps the depthwise Conv's place.
pub(in crate::schedule) fn fuse(f: &mut Fuse) {
    let g = f.g;
    f.merge_into_later(|f, ci| {
        let c = &f.sched.kernels[ci];
        let dw = c.anchor.filter(|&a| is_depthwise_conv(g, a))?;
        if !c.folds.is_empty() {
            return None;
        }
        let x = g.node(dw).inputs[0]?;
        let (di, ex) = lone_conv_chain(f, x, dw)?;
        let ex_in = g.node(ex).inputs[0]?;
        let f32 = g.ty(x).dtype.is_float() && g.ty(ex_in).dtype.is_float();
        if di >= ci || !is_pointwise_conv(g, ex) || g.ty(ex_in).rank() != 4 || !f32 {
            return None;
        }
        let Op::Conv { window: w, .. } = &g.node(dw).op else { return None };
        let (os, e) = (&g.ty(g.node(dw).outputs[0]).shape, g.ty(x).shape[1]);
        let kernel = (w.kernel[0], w.kernel[1]);
        let strides = (w.strides[0], w.strides[1]);
        let cin = g.ty(ex_in).shape[1];
        let dil = (w.dilations[0], w.dilations[1]);
        if expand_tile(os[0], (os[2], os[3]), kernel, strides, dil, cin, e, None).is_none() {
            let why = format!(
                "Conv → depthwise Conv: no tile of the {}x{} output both fits the expansion's window in \
                     workgroup memory and recomputes it at most {EXPAND_MAX_RECOMPUTE}x",
                os[2], os[3]
            );
            f.reasons.insert((g.value(x).producer?, dw), why);
            return None;
        }
        let d = &f.sched.kernels[di];
        let merged = c.with(Fold::Expand(FoldedConv { conv: ex, then: d.elementwise.clone() }));
        f.fits(&merged).then_some((di, merged))
    });
}
