//! LSTM, GRU and RNN attributes: the cell, directions, hidden size, activations (with the alphas and betas they
//! consume, in order), clip and layout.

use crate::importer::Attrs;
use crate::ImportError;
use wgslc_ir::{Activation, Cell, Op, RnnAttrs};

pub(crate) fn attrs(a: &Attrs) -> Result<Op, ImportError> {
    let cell = match a.node.op_type.as_str() {
        "LSTM" => Cell::Lstm { input_forget: a.int("input_forget", 0) != 0 },
        "GRU" => Cell::Gru { linear_before_reset: a.int("linear_before_reset", 0) != 0 },
        _ => Cell::Rnn,
    };
    let (directions, reverse) = match a.string("direction").as_deref().unwrap_or("forward") {
        "forward" => (1, false),
        "reverse" => (1, true),
        "bidirectional" => (2, false),
        other => return Err(a.err(format!("unknown direction '{other}'"))),
    };
    let hidden = a.int("hidden_size", 0);
    let hidden = usize::try_from(hidden).map_err(|_| a.err(format!("hidden_size {hidden} is negative")))?;
    let per = cell.activations();
    let names: Vec<String> = match a.get("activations") {
        Some(at) => at.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        None => {
            let one: &[&str] = match cell {
                Cell::Lstm { .. } => &["Sigmoid", "Tanh", "Tanh"],
                Cell::Gru { .. } => &["Sigmoid", "Tanh"],
                Cell::Rnn => &["Tanh"],
            };
            one.iter().cycle().take(per * directions).map(|s| s.to_string()).collect()
        }
    };
    // One direction's list serves both when a bidirectional node gives only one.
    let names = if names.len() == per && directions == 2 { [names.clone(), names].concat() } else { names };
    if names.len() != per * directions {
        return Err(
            a.err(format!("{} activations for {directions} direction(s) of a cell that takes {per}", names.len()))
        );
    }
    let floats = |key: &str| a.get(key).map(|x| x.floats.clone()).unwrap_or_default();
    let (alphas, betas) = (floats("activation_alpha"), floats("activation_beta"));
    let (mut ai, mut bi) = (0, 0);
    let mut activations = Vec::new();
    for n in &names {
        let mut alpha = |default: f32| {
            ai += 1;
            alphas.get(ai - 1).copied().unwrap_or(default)
        };
        let mut beta = |default: f32| {
            bi += 1;
            betas.get(bi - 1).copied().unwrap_or(default)
        };
        activations.push(match n.to_ascii_lowercase().as_str() {
            "sigmoid" => Activation::Sigmoid,
            "tanh" => Activation::Tanh,
            "relu" => Activation::Relu,
            "leakyrelu" => Activation::LeakyRelu(alpha(0.01)),
            "thresholdedrelu" => Activation::ThresholdedRelu(alpha(1.0)),
            "scaledtanh" => Activation::ScaledTanh(alpha(1.0), beta(1.0)),
            "hardsigmoid" => Activation::HardSigmoid(alpha(0.2), beta(0.5)),
            "elu" => Activation::Elu(alpha(1.0)),
            "softsign" => Activation::Softsign,
            "softplus" => Activation::Softplus,
            "affine" => Activation::Affine(alpha(1.0), beta(0.0)),
            other => return Err(a.err(format!("unknown activation '{other}'"))),
        });
    }
    let clip = a.get("clip").map(|x| x.f).filter(|c| *c > 0.0);
    let batch_major = match a.int("layout", 0) {
        0 => false,
        1 => true,
        l => return Err(a.err(format!("layout {l} is not 0 or 1"))),
    };
    Ok(Op::Rnn(Box::new(RnnAttrs { cell, directions, reverse, hidden, activations, clip, batch_major })))
}
