//! Runs the MLP that build.rs compiled, from the artifact embedded in this binary.

use wgslc_example_build_rs::{Mlp, MlpInputs};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = wgslc_runtime::Gpu::new()?;
    println!("running on {}", gpu.describe());
    let mlp = Mlp::from_embedded(gpu)?;
    let x: Vec<f32> = (0..4 * 16).map(|i| (i as f32 * 0.37).sin()).collect();
    let out = mlp.run(MlpInputs { x })?;
    println!("y[0][..4] = {:?} ({} values)", &out.y[..4], out.y.len());
    Ok(())
}
