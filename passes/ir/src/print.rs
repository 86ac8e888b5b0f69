//! A text form of the graph, for `--dump-after` and test expectations.

use crate::Graph;
use std::fmt::Write;

/// Prints inputs, nodes in topological order (with each op's parameters) and outputs, one per line.
pub fn print(g: &Graph) -> String {
    let mut s = String::new();
    let ty = |v| g.value(v).ty.as_ref().map(|t| t.to_string()).unwrap_or_else(|| "?".into());
    for &v in &g.inputs {
        let _ = writeln!(s, "input  {}: {}", g.value(v).name, ty(v));
    }
    let order = match g.topo_order() {
        Ok(o) => o,
        Err(e) => return format!("{s}<{e}>\n"),
    };
    for n in order {
        let node = g.node(n);
        let ins: Vec<String> = node
            .inputs
            .iter()
            .map(|i| match i {
                Some(v) if g.value(*v).data.is_some() => format!("const {}", g.value(*v).name),
                Some(v) => g.value(*v).name.clone(),
                None => "_".into(),
            })
            .collect();
        let outs: Vec<String> = node.outputs.iter().map(|&o| format!("{}: {}", g.value(o).name, ty(o))).collect();
        let _ = writeln!(s, "{} = {:?}({})  # {}", outs.join(", "), node.op, ins.join(", "), node.name);
    }
    for &v in &g.outputs {
        let _ = writeln!(s, "output {}: {}", g.value(v).name, ty(v));
    }
    s
}
