//! The time loop of LSTM / GRU / RNN ([`Op::Recurrence`]): one workgroup per direction and batch element walks
//! every step inside one dispatch, each of its 256 threads owning the hidden units `lid + 256·m`. A step's gates
//! read the recurrent weights transposed (`[D, H, G·H]`, so neighbouring threads read neighbouring words) against
//! the previous state, which the workgroup shares in workgroup memory.

use super::*;
use wgslc_ir::{Activation, Cell, RnnAttrs};

#[derive(Template)]
#[template(path = "recurrence.wgsl", escape = "none")]
pub(super) struct RecurrenceTpl {
    pub(super) h: Header,
    pub(super) helpers: Helpers,
    pub(super) cell: &'static str,
    pub(super) acts: String,
    pub(super) clip: String,
    pub(super) groups_x: u32,
    pub(super) d: usize,
    pub(super) t: usize,
    pub(super) b: usize,
    pub(super) hid: usize,
    /// Steps of the recurrent product's k loop per iteration (loads in flight per thread).
    pub(super) unroll: usize,
    pub(super) gh: usize,
    pub(super) upt: usize,
    pub(super) gates: usize,
    /// Each gate's first column of a row of the gate products (`off`, `hid` apart), and its `unroll` recurrent
    /// weights per step of k (`j · gh + off`).
    pub(super) gate_lanes: Vec<GateLane>,
    /// `d · b` (workgroups), `2 · hid` and `3 · hid` (the third gate's columns, a direction's peepholes), and the
    /// part of the k loop the unrolled loop takes (`hid` rounded down to a multiple of `unroll`).
    pub(super) dirs_batch: usize,
    pub(super) hid2: usize,
    pub(super) hid3: usize,
    pub(super) hid_unrolled: usize,
    pub(super) lstm: bool,
    pub(super) gru: bool,
    pub(super) gru_lbr: bool,
    pub(super) input_forget: bool,
    pub(super) reverse: bool,
    pub(super) has_state0: bool,
    pub(super) has_p: bool,
    pub(super) has_lens: bool,
    pub(super) has_rbh: bool,
}

/// One gate of a recurrence's step.
pub(super) struct GateLane {
    pub(super) i: usize,
    pub(super) off: usize,
    pub(super) rows: Vec<Lane>,
}

/// An activation as a WGSL expression of `x`.
fn activation(a: Activation, helpers: &mut Helpers) -> String {
    let l = f32_lit;
    match a {
        Activation::Sigmoid => "1.0 / (1.0 + exp(-x))".into(),
        Activation::Tanh => {
            helpers.tanh = true;
            "tanh_(x)".into()
        }
        Activation::Relu => "max(x, 0.0)".into(),
        Activation::LeakyRelu(al) => format!("select(x, {} * x, x < 0.0)", l(al)),
        Activation::ThresholdedRelu(al) => format!("select(0.0, x, x > {})", l(al)),
        Activation::ScaledTanh(al, be) => {
            helpers.tanh = true;
            format!("{} * tanh_({} * x)", l(al), l(be))
        }
        Activation::HardSigmoid(al, be) => format!("clamp({} * x + {}, 0.0, 1.0)", l(al), l(be)),
        Activation::Elu(al) => format!("select(x, {} * (exp(x) - 1.0), x < 0.0)", l(al)),
        Activation::Softsign => "x / (1.0 + abs(x))".into(),
        Activation::Softplus => {
            helpers.log1p = true;
            "(max(x, 0.0) + log1p_(exp(-abs(x))))".into()
        }
        Activation::Affine(al, be) => format!("{} * x + {}", l(al), l(be)),
    }
}

impl Emitter<'_> {
    pub(super) fn recurrence(&self, n: NodeId, at: &RnnAttrs) -> Result<EmittedKernel, EmitError> {
        let g = self.g;
        let node = g.node(n);
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let (Some(gx), Some(rt)) = (input(0), input(1)) else {
            return Err(self.err(n, "the recurrence needs its projected inputs and recurrent weights"));
        };
        let [d, t, b, gh] = g.ty(gx).shape[..] else {
            return Err(self.err(n, "the projected inputs must be [D, T, B, G·H]"));
        };
        let hid = at.hidden;
        let gru_reset = matches!(at.cell, Cell::Gru { linear_before_reset: false });
        // The shared state (and r ⊙ h for GRU without linear_before_reset) in workgroup memory.
        let shared = 4 * hid * if gru_reset { 2 } else { 1 };
        if shared > self.limits.max_compute_workgroup_storage_size as usize {
            return Err(self.err(
                n,
                format!(
                    "{hid} hidden units need {shared} bytes of workgroup memory, more than the device's {}",
                    self.limits.max_compute_workgroup_storage_size
                ),
            ));
        }
        let mut b_list: Vec<(ValueId, bool, &str)> = vec![(gx, false, "gx"), (rt, false, "rt")];
        for (i, var) in [(2, "s0"), (3, "p"), (4, "lens"), (5, "rbh")] {
            if let Some(v) = input(i) {
                b_list.push((v, false, var));
            }
        }
        b_list.push((node.outputs[0], true, "y"));
        b_list.push((node.outputs[1], true, "s_out"));
        let (h, wg, groups_x) = self.launch(n, None, "recurrence.wgsl", &b_list, d * b)?;
        let mut helpers = Helpers::default();
        let per = at.cell.activations();
        let mut acts = String::new();
        for k in 0..per {
            let e0 = activation(at.activations[k], &mut helpers);
            let e1 = activation(at.activations[if d > 1 { per + k } else { k }], &mut helpers);
            acts.push_str(&format!(
                "fn act{k}(x: f32, d: u32) -> f32 {{\n    if (d == 0u) {{\n        return {e0};\n    }}\n    return {e1};\n}}\n"
            ));
        }
        let clip = match at.clip {
            Some(c) => format!("clamp(x, -{0}, {0})", f32_lit(c)),
            None => "x".into(),
        };
        let unroll = 8;
        let tpl = RecurrenceTpl {
            h,
            helpers,
            cell: node.op.name(),
            acts,
            clip,
            groups_x,
            d,
            t,
            b,
            hid,
            gh,
            upt: hid.div_ceil(256),
            unroll,
            gates: at.cell.gates(),
            gate_lanes: (0..at.cell.gates())
                .map(|g| GateLane {
                    i: g,
                    off: g * hid,
                    rows: (0..unroll).map(|j| Lane { i: j, off: j * gh + g * hid }).collect(),
                })
                .collect(),
            dirs_batch: d * b,
            hid2: 2 * hid,
            hid3: 3 * hid,
            hid_unrolled: hid / unroll * unroll,
            lstm: matches!(at.cell, Cell::Lstm { .. }),
            gru: matches!(at.cell, Cell::Gru { .. }),
            gru_lbr: matches!(at.cell, Cell::Gru { linear_before_reset: true }),
            input_forget: matches!(at.cell, Cell::Lstm { input_forget: true }),
            reverse: at.reverse,
            has_state0: input(2).is_some(),
            has_p: input(3).is_some(),
            has_lens: input(4).is_some(),
            has_rbh: input(5).is_some(),
        };
        self.kernel(n, node.name.clone(), "recurrence", tpl.render(), &b_list, wg)
    }
}
