//! Scheduling: which nodes become which kernel, in dispatch order.

use crate::PassError;
use wgslc_ir::{Graph, NodeId, Op};

/// A set of nodes emitted as one WGSL module and dispatched together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelGroup {
    /// Nodes in data-dependency order; the last one's output is what the kernel writes.
    pub nodes: Vec<NodeId>,
}

/// The ordered kernels of a graph. Alias nodes have no kernel: they only rename storage.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    pub kernels: Vec<KernelGroup>,
}

/// Groups nodes into kernels, one kernel per op (the fusion pass will form larger groups).
///
/// Requires: a legalized graph. Establishes: every non-Alias node is in exactly one group; groups are in an
/// order where every producer's group comes before its consumers' groups.
pub fn schedule(g: &Graph) -> Result<Schedule, PassError> {
    let kernels = g
        .topo_order()?
        .into_iter()
        .filter(|&n| g.node(n).op != Op::Alias)
        .map(|n| KernelGroup { nodes: vec![n] })
        .collect();
    Ok(Schedule { kernels })
}
