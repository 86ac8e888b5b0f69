//! The parts of torch's export schema (`torch/_export/serde/schema.yaml`, major version 8) that wgslc reads, as
//! serde types. Unions are JSON objects with one key (`{"as_tensor": {...}}`), which is serde's externally tagged
//! enum; enums are integers. Fields wgslc never reads (node metadata, module call graph) are skipped, and an
//! unknown field is ignored, as torch's own reader does for minor versions; an unknown union member is an error
//! naming it.

use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The schema major version this reader knows (torch 2.6 to 2.11+ write 8).
pub const SCHEMA_MAJOR: i64 = 8;

#[derive(Debug, Deserialize)]
pub struct ExportedProgram {
    pub graph_module: GraphModule,
    #[serde(default)]
    pub range_constraints: BTreeMap<String, RangeConstraint>,
    pub schema_version: SchemaVersion,
    #[serde(default)]
    pub verifiers: Vec<String>,
    #[serde(default)]
    pub torch_version: Option<String>,
}

/// Just the version, read before the rest so that an unknown major is refused by name rather than by whatever
/// field it changed.
#[derive(Debug, Deserialize)]
pub struct VersionOnly {
    pub schema_version: SchemaVersion,
    #[serde(default)]
    pub torch_version: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct SchemaVersion {
    pub major: i64,
    pub minor: i64,
}

#[derive(Debug, Deserialize)]
pub struct RangeConstraint {
    pub min_val: Option<i64>,
    pub max_val: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct GraphModule {
    pub graph: Graph,
    pub signature: GraphSignature,
}

#[derive(Debug, Deserialize)]
pub struct Graph {
    pub inputs: Vec<Argument>,
    pub outputs: Vec<Argument>,
    pub nodes: Vec<Node>,
    pub tensor_values: BTreeMap<String, TensorMeta>,
    #[serde(default)]
    pub sym_int_values: BTreeMap<String, SymInt>,
}

#[derive(Debug, Deserialize)]
pub struct GraphSignature {
    pub input_specs: Vec<InputSpec>,
    pub output_specs: Vec<OutputSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputSpec {
    UserInput { arg: Argument },
    Parameter { arg: TensorArgument, parameter_name: String },
    Buffer { arg: TensorArgument, buffer_name: String },
    TensorConstant { arg: TensorArgument, tensor_constant_name: String },
    CustomObj { custom_obj_name: String },
    Token { arg: TensorArgument },
    ConstantInput { name: String, value: serde_json::Value },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputSpec {
    UserOutput { arg: Argument },
    LossOutput { arg: TensorArgument },
    BufferMutation { arg: TensorArgument, buffer_name: String },
    GradientToParameter { arg: TensorArgument },
    GradientToUserInput { arg: TensorArgument },
    UserInputMutation { arg: TensorArgument, user_input_name: String },
    Token { arg: TensorArgument },
    ParameterMutation { arg: TensorArgument },
}

#[derive(Debug, Deserialize)]
pub struct Node {
    pub target: String,
    pub inputs: Vec<NamedArgument>,
    pub outputs: Vec<Argument>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct NamedArgument {
    pub name: String,
    pub arg: Argument,
}

#[derive(Clone, Debug, Deserialize)]
pub struct TensorArgument {
    pub name: String,
}

/// A SymInt argument: a named symbolic value (a `sym_size` output, say) or a literal.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymIntArgument {
    AsName(String),
    AsInt(i64),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptionalTensor {
    AsTensor(TensorArgument),
    AsNone(serde_json::Value),
}

/// An argument or output of a node: every member of the schema's `Argument` union.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Argument {
    AsNone(serde_json::Value),
    AsTensor(TensorArgument),
    AsTensors(Vec<TensorArgument>),
    AsInt(i64),
    AsInts(Vec<i64>),
    AsFloat(Float),
    AsFloats(Vec<Float>),
    AsString(String),
    AsStrings(Vec<String>),
    AsSymInt(SymIntArgument),
    AsSymInts(Vec<SymIntArgument>),
    AsScalarType(i64),
    AsMemoryFormat(i64),
    AsLayout(i64),
    AsDevice(serde_json::Value),
    AsBool(bool),
    AsBools(Vec<bool>),
    AsSymBool(serde_json::Value),
    AsSymBools(serde_json::Value),
    AsGraph(serde_json::Value),
    AsOptionalTensors(Vec<OptionalTensor>),
    AsCustomObj(serde_json::Value),
    AsOperator(String),
    AsSymFloat(serde_json::Value),
    AsSymFloats(serde_json::Value),
    AsOptionalTensor(OptionalTensor),
    AsComplex(serde_json::Value),
    AsNestedTensors(serde_json::Value),
    AsIntLists(Vec<Vec<i64>>),
    AsStringToArgument(serde_json::Value),
}

impl Argument {
    /// The schema's name of this union member, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Argument::AsNone(_) => "None",
            Argument::AsTensor(_) => "a tensor",
            Argument::AsTensors(_) => "a tensor list",
            Argument::AsInt(_) => "an int",
            Argument::AsInts(_) => "an int list",
            Argument::AsFloat(_) => "a float",
            Argument::AsFloats(_) => "a float list",
            Argument::AsString(_) => "a string",
            Argument::AsStrings(_) => "a string list",
            Argument::AsSymInt(_) => "a SymInt",
            Argument::AsSymInts(_) => "a SymInt list",
            Argument::AsScalarType(_) => "a dtype",
            Argument::AsMemoryFormat(_) => "a memory format",
            Argument::AsLayout(_) => "a layout",
            Argument::AsDevice(_) => "a device",
            Argument::AsBool(_) => "a bool",
            Argument::AsBools(_) => "a bool list",
            Argument::AsSymBool(_) | Argument::AsSymBools(_) => "a SymBool",
            Argument::AsGraph(_) => "a subgraph",
            Argument::AsOptionalTensors(_) => "an optional tensor list",
            Argument::AsCustomObj(_) => "a custom object",
            Argument::AsOperator(_) => "an operator",
            Argument::AsSymFloat(_) | Argument::AsSymFloats(_) => "a SymFloat",
            Argument::AsOptionalTensor(_) => "an optional tensor",
            Argument::AsComplex(_) => "a complex number",
            Argument::AsNestedTensors(_) => "nested tensor lists",
            Argument::AsIntLists(_) => "int lists",
            Argument::AsStringToArgument(_) => "a dict",
        }
    }
}

/// A float as torch's serializer writes it: a JSON number, or the strings `Infinity`, `-Infinity` and `NaN`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Float(pub f64);

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Float, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(x) => Ok(Float(x)),
            Raw::Text(t) => match t.as_str() {
                "Infinity" | "inf" => Ok(Float(f64::INFINITY)),
                "-Infinity" | "-inf" => Ok(Float(f64::NEG_INFINITY)),
                "NaN" | "nan" => Ok(Float(f64::NAN)),
                _ => Err(serde::de::Error::custom(format!("'{t}' is not a float"))),
            },
        }
    }
}

/// The program JSON with the bare `NaN`, `Infinity` and `-Infinity` that Python's `json` writes for non-finite
/// floats (torch 2.6/2.7 serialize float arguments that way; JSON has no such numbers, so serde_json refuses them)
/// quoted as strings, which [`Float`] reads. Outside strings, valid JSON holds no other `N` or `I`, so the rewrite
/// changes nothing else; JSON without them is returned as it is.
pub fn quote_non_finite(json: &[u8]) -> Cow<'_, [u8]> {
    const TOKENS: [&[u8]; 3] = [b"NaN", b"Infinity", b"-Infinity"];
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut copied, mut in_string) = (0, 0, false);
    while i < json.len() {
        let c = json[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else if c == b'"' {
            in_string = true;
        } else if let Some(t) = TOKENS.iter().find(|t| json[i..].starts_with(t)) {
            let o = out.get_or_insert_with(|| Vec::with_capacity(json.len() + 64));
            o.extend_from_slice(&json[copied..i]);
            o.push(b'"');
            o.extend_from_slice(t);
            o.push(b'"');
            i += t.len();
            copied = i;
            continue;
        }
        i += 1;
    }
    match out {
        None => Cow::Borrowed(json),
        Some(mut o) => {
            o.extend_from_slice(&json[copied..]);
            Cow::Owned(o)
        }
    }
}

/// A size, stride or offset: an integer or a sympy expression over the program's symbols.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymInt {
    AsInt(i64),
    AsExpr(SymExpr),
}

#[derive(Clone, Debug, Deserialize)]
pub struct SymExpr {
    pub expr_str: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct TensorMeta {
    pub dtype: i64,
    pub sizes: Vec<SymInt>,
    #[serde(default)]
    pub strides: Vec<SymInt>,
    #[serde(default = "zero_offset")]
    pub storage_offset: SymInt,
    #[serde(default = "strided")]
    pub layout: i64,
}

fn zero_offset() -> SymInt {
    SymInt::AsInt(0)
}

fn strided() -> i64 {
    7
}

/// `data/weights/model_weights_config.json` and `data/constants/model_constants_config.json` (torch ≥ 2.9).
#[derive(Debug, Deserialize)]
pub struct PayloadConfig {
    pub config: BTreeMap<String, PayloadMeta>,
}

#[derive(Debug, Deserialize)]
pub struct PayloadMeta {
    pub path_name: String,
    #[serde(default)]
    pub use_pickle: bool,
    pub tensor_meta: Option<TensorMeta>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `json.dumps(float("-inf"))` is `-Infinity`: quoted where it is a value, left alone inside strings.
    #[test]
    fn non_finite_numbers_read_as_floats() {
        let json = br#"{"a": [-Infinity, Infinity, NaN, 1.5], "s": "NaN \"Infinity\" -Infinity", "t": true}"#;
        let quoted = quote_non_finite(json);
        assert_eq!(
            std::str::from_utf8(&quoted).unwrap(),
            r#"{"a": ["-Infinity", "Infinity", "NaN", 1.5], "s": "NaN \"Infinity\" -Infinity", "t": true}"#
        );
        #[derive(Deserialize)]
        struct Doc {
            a: Vec<Float>,
            s: String,
        }
        let doc: Doc = serde_json::from_slice(&quoted).unwrap();
        assert_eq!(doc.a[0].0, f64::NEG_INFINITY);
        assert_eq!(doc.a[1].0, f64::INFINITY);
        assert!(doc.a[2].0.is_nan());
        assert_eq!(doc.s, "NaN \"Infinity\" -Infinity");
        let plain = br#"{"a": 1}"#;
        assert!(matches!(quote_non_finite(plain), Cow::Borrowed(_)));
    }
}
