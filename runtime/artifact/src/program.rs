//! The generation loop as data: a decoder artifact's [`Program`] says what a generation writes into the loop's
//! inputs, which dispatches it replays and what it copies between buffers, at each point of the loop, with every
//! value an affine function of the loop's variables ([`Vars`]). The compiler writes it (it alone knows the cache
//! layout it proved); both runtimes interpret it, so neither implements the decode protocol itself.

use crate::{ArtifactError, Plan, StorageType};
use serde::{Deserialize, Serialize};

/// What one generation runs, phase by phase. In every phase the writes come first (they reach the GPU through
/// the queue, before the phase's commands are submitted), then the commands in order: dispatches (consecutive ones
/// in one compute pass), clears and copies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// Buffers of the runtime's own that copies read (`Buf::Constant`), each written once per generation, as the
    /// storage type of input `like`, with `len` the prompt's length and the other variables 0.
    pub constants: Vec<Constant>,
    /// Once, before the first prefill chunk (variables: `len`).
    pub start: Vec<Instr>,
    /// Each prefill chunk, one submit (`pos`: its first token's position; `real`: its tokens before the padding
    /// that fills the last chunk; `len`).
    pub chunk: Vec<Instr>,
    /// After the last chunk's commands, in its submit (its variables); no writes.
    pub last: Vec<Instr>,
    /// Once, after the prefill (variables: `len`).
    pub decode_start: Vec<Instr>,
    /// Each decode step (`pos`: the position of the token it reads; `len`). A submit holds several steps, so no
    /// writes and no clears.
    pub step: Vec<Instr>,
}

/// The loop's variables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vars {
    pub pos: i64,
    pub real: i64,
    pub len: i64,
}

/// `c + pos·pos + real·real + len·len`; absent terms are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Affine {
    #[serde(skip_serializing_if = "is_zero")]
    pub c: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub pos: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub real: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub len: i64,
}

fn is_zero(x: &i64) -> bool {
    *x == 0
}

impl Affine {
    pub const fn c(c: i64) -> Affine {
        Affine { c, pos: 0, real: 0, len: 0 }
    }

    pub fn at(&self, v: Vars) -> i64 {
        self.c + self.pos * v.pos + self.real * v.real + self.len * v.len
    }
}

/// One instruction: `{"run": 1}`, `{"copy": {…}}`, ….
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Instr {
    /// Zeroes an input's buffer (index into `Plan::inputs`).
    Clear(usize),
    Write(Write),
    /// Replays a step's dispatches (index into `Decoder::steps`): `dispatches`, or `sample.dispatches` when the
    /// generation samples.
    Run(usize),
    /// A step's advance kernel (`Step::advance`): `greedy` or `sample`, as the generation does.
    Advance(usize),
    Copy(Copy),
}

/// Writes `values` at the start of an input (index into `Plan::inputs`), as its storage type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Write {
    pub input: usize,
    pub values: Values,
}

/// Copies `bytes` bytes (all byte counts and offsets are multiples of 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Copy {
    pub from: Place,
    pub to: Place,
    pub bytes: Affine,
}

/// A byte offset in a buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Place {
    pub buffer: Buf,
    pub offset: Affine,
}

/// A buffer of the loop: an input's or an output's (indices into `Plan::inputs` / `Plan::outputs`), a step's
/// chosen token (index into `Decoder::steps`: its `next_token` output, or `sample.token` when the generation
/// samples), or one of [`Program::constants`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Buf {
    Input(usize),
    Output(usize),
    Token(usize),
    Constant(usize),
}

/// A runtime buffer of constants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Constant {
    /// Index into `Plan::inputs`: the input whose storage type the values are written as.
    pub like: usize,
    pub values: Values,
}

/// `len` integers, element `i` of which is:
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Values {
    /// `start + min(i, last)`;
    Iota(Iota),
    /// the prompt's token at `start + min(i, last)`;
    Prompt(Iota),
    /// 1 where `from <= i < to` for one of `ranges`, else 0.
    Mask(Mask),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Iota {
    pub len: Affine,
    pub start: Affine,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Affine>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Mask {
    pub len: Affine,
    pub ranges: Vec<[Affine; 2]>,
}

impl Iota {
    fn indices(&self, v: Vars) -> impl Iterator<Item = i64> {
        let (start, last) = (self.start.at(v), self.last.map(|l| l.at(v)));
        (0..self.len.at(v).max(0)).map(move |i| start + last.map_or(i, |l| i.min(l)))
    }
}

impl Values {
    /// The values at `v`; `prompt` is the generation's prompt. Errors name what is out of range.
    pub fn at(&self, v: Vars, prompt: &[i64]) -> Result<Vec<i64>, String> {
        match self {
            Values::Iota(it) => Ok(it.indices(v).collect()),
            Values::Prompt(it) => {
                it.indices(v)
                    .map(|i| {
                        usize::try_from(i).ok().and_then(|i| prompt.get(i).copied()).ok_or_else(|| {
                            format!("the program reads token {i} of a prompt of {} tokens", prompt.len())
                        })
                    })
                    .collect()
            }
            Values::Mask(m) => Ok((0..m.len.at(v).max(0))
                .map(|i| i64::from(m.ranges.iter().any(|[from, to]| from.at(v) <= i && i < to.at(v))))
                .collect()),
        }
    }
}

impl Program {
    /// The phases with their names.
    pub fn phases(&self) -> [(&'static str, &[Instr]); 5] {
        [
            ("start", &self.start),
            ("chunk", &self.chunk),
            ("last", &self.last),
            ("decode_start", &self.decode_start),
            ("step", &self.step),
        ]
    }
}

impl Plan {
    /// The program's indices in range, its writes first in each phase and only where a phase allows them, its
    /// advances only of steps that have advance kernels.
    pub(crate) fn check_program(&self, p: &Program, steps: &[crate::Step]) -> Result<(), ArtifactError> {
        let bad = |m: String| Err(ArtifactError::Invalid(format!("decoder program: {m}")));
        let input =
            |i: usize| self.inputs.get(i).filter(|t| t.storage != StorageType::F32 || t.dtype != crate::Dtype::Int64);
        for (i, c) in p.constants.iter().enumerate() {
            if input(c.like).is_none() {
                return bad(format!("constant {i} is written like input {}, which is not an input it can be", c.like));
            }
        }
        for (name, instrs) in p.phases() {
            let writes = instrs.iter().take_while(|i| matches!(i, Instr::Write(_))).count();
            if instrs[writes..].iter().any(|i| matches!(i, Instr::Write(_)))
                || (writes > 0 && matches!(name, "last" | "step"))
            {
                return bad(format!("phase '{name}' writes after its commands or where it may not write"));
            }
            for (n, ins) in instrs.iter().enumerate() {
                let buf_ok = |b: &Buf| match *b {
                    Buf::Input(i) => i < self.inputs.len(),
                    Buf::Output(i) => i < self.outputs.len(),
                    Buf::Token(s) => s < steps.len(),
                    Buf::Constant(c) => c < p.constants.len(),
                };
                let ok = match ins {
                    Instr::Clear(i) => name != "step" && *i < self.inputs.len(),
                    Instr::Write(w) if input(w.input).is_none() => {
                        return bad(format!(
                            "phase '{name}': instruction {n} writes input {}, which is missing or an int64 stored as \
                             floats",
                            w.input
                        ));
                    }
                    Instr::Write(_) => true,
                    Instr::Run(s) => *s < steps.len(),
                    Instr::Advance(s) => steps.get(*s).is_some_and(|st| st.advance.is_some()),
                    Instr::Copy(c) => buf_ok(&c.from.buffer) && buf_ok(&c.to.buffer),
                };
                if !ok {
                    return bad(format!("phase '{name}': instruction {n} names something the plan does not have"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POS: Affine = Affine { c: 0, pos: 1, real: 0, len: 0 };
    const REAL: Affine = Affine { c: 0, pos: 0, real: 1, len: 0 };

    #[test]
    fn values_are_affine_in_the_loop_variables() {
        let v = Vars { pos: 4, real: 2, len: 6 };
        let last = Some(Affine { c: -1, ..REAL });
        let iota = Values::Iota(Iota { len: Affine::c(4), start: POS, last });
        assert_eq!(iota.at(v, &[]).unwrap(), [4, 5, 5, 5]);
        // The last chunk padded with its last real token.
        let prompt = [10, 11, 12, 13, 14, 15];
        let tokens = Values::Prompt(Iota { len: Affine::c(4), start: POS, last });
        assert_eq!(tokens.at(v, &prompt).unwrap(), [14, 15, 15, 15]);
        let past = Values::Prompt(Iota { len: Affine::c(3), start: Affine { c: 2, ..POS }, last: None });
        assert!(past.at(v, &prompt).unwrap_err().contains("token 6 of a prompt of 6"));
        // The window's rows before `pos` and the chunk's real rows after the 8-row window.
        let mask = Values::Mask(Mask {
            len: Affine::c(12),
            ranges: vec![[Affine::c(0), POS], [Affine::c(8), Affine { c: 8, ..REAL }]],
        });
        assert_eq!(mask.at(v, &[]).unwrap(), [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0]);
        // JSON: absent terms are 0.
        let json = serde_json::to_string(&Affine { c: -1, ..REAL }).unwrap();
        assert_eq!(json, r#"{"c":-1,"real":1}"#);
        assert_eq!(serde_json::from_str::<Affine>("{}").unwrap(), Affine::default());
    }
}
