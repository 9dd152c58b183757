//! `mpipec std [hardware|models]`: the standard library as two tables.

use clap::ValueEnum;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum What {
    Hardware,
    Models,
}

pub fn run(what: Option<What>) -> u8 {
    if what != Some(What::Models) {
        hardware();
    }
    if what.is_none() {
        println!();
    }
    if what != Some(What::Hardware) {
        models();
    }
    0
}

fn hardware() {
    println!("hardware (`use std::hardware::NAME;`); links as latency α and bandwidth β");
    println!(
        "{:<14} {:>15} {:>10} {:>14} {:>9} {:>22} {:>22}",
        "name", "peak bf16", "HBM", "HBM bandwidth", "per node", "intra-node α, β", "inter-node α, β"
    );
    for (_, h) in mpipe::catalog::hardware() {
        let link = |l: &mpipe::plan::Link| format!("{:.1} us, {:.0} GB/s", l.alpha * 1e6, l.beta / 1e9);
        println!(
            "{:<14} {:>8.1} TFLOP/s {:>7.1} GB {:>9.2} TB/s {:>9} {:>22} {:>22}",
            h.name,
            h.peak_bf16 / 1e12,
            h.hbm_bytes / 1e9,
            h.hbm_bandwidth / 1e12,
            h.devices_per_node,
            link(&h.intra_node),
            link(&h.inter_node)
        );
    }
}

fn models() {
    println!("models (`use std::models::NAME;`)");
    println!("{:<16} {:<8} {:>6} {:>7} {:>11}", "name", "kind", "layers", "hidden", "parameters");
    for m in mpipe::catalog::models() {
        let kind = if m.arch.is_encoder() { "encoder" } else { "decoder" };
        println!("{:<16} {:<8} {:>6} {:>7} {:>9.2} B", m.arch.name, kind, m.arch.layers(), m.hidden(), m.params / 1e9);
    }
}
