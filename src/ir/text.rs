//! plan.txt: the IR as a listing people read and the snapshots hold.

use std::fmt::Write;

use super::{Dir, Instr, Op, PlanIr};

/// One instruction: `forward s1 mb0`, `send act s1 mb0 -> 2`, `all_reduce pp enc`.
pub fn instr(i: &Instr) -> String {
    let sm = |i: &Instr| format!("s{} mb{}", i.stage.unwrap_or(0), i.mb.unwrap_or(0));
    let dir = |d: Option<Dir>| match d {
        Some(Dir::Act) => "act",
        Some(Dir::Grad) => "grad",
        None => "?",
    };
    let text = match i.op {
        Op::Send => format!("send {} {} -> {}", dir(i.dir), sm(i), i.peer.unwrap_or(0)),
        Op::Recv => format!("recv {} {} <- {}", dir(i.dir), sm(i), i.peer.unwrap_or(0)),
        Op::AllReduce => {
            let group = match i.group {
                Some(super::Group::Pp) => "pp",
                Some(super::Group::Dp) => "dp",
                None => "?",
            };
            let bucket = i.stage.map(|s| format!(" s{s}")).unwrap_or_default();
            let wait = if i.asynchronous { " (async)" } else { "" };
            format!("all_reduce {group} {}{bucket}{wait}", i.region.as_deref().unwrap_or(""))
        }
        Op::OptimizerStep => "optimizer_step".to_string(),
        op => format!("{} {}", op.name(), sm(i)),
    };
    match (i.overlap, i.step) {
        (true, _) => format!("{text} (overlapped)"),
        (false, Some(ahead)) => format!("{text} (for step +{ahead})"),
        (false, None) => text,
    }
}

pub fn render(ir: &PlanIr) -> String {
    let mut out = String::new();
    let p = &ir.pipeline;
    let _ = writeln!(out, "{} v{}  {}", ir.format, ir.version, ir.source);
    let _ = writeln!(
        out,
        "pipeline: {} ranks, {} microbatches, dp {}, tp {}, {:?} mapping",
        p.ranks, p.microbatches, p.dp, p.tp, p.mapping
    );
    let _ = writeln!(out, "\nregions:");
    for r in &ir.regions {
        let train = if r.trainable {
            "trainable"
        } else if r.backward {
            "frozen, backward"
        } else {
            "frozen"
        };
        let _ = writeln!(
            out,
            "  {:<12} {:<10} {:<16} {:<17} layers {}..{}",
            r.name,
            r.layout.to_string(),
            r.skeleton,
            train,
            r.layers[0],
            r.layers[1]
        );
    }
    let _ = writeln!(out, "\nstages:");
    for s in &ir.stages {
        let on = match s.rank {
            Some(r) => format!("rank {r}"),
            None => "all ranks".to_string(),
        };
        let _ = writeln!(out, "  {:>3}  {:<12} {:<9} layers {}..{}", s.id, s.region, on, s.layers[0], s.layers[1]);
    }
    for (region, owners) in &ir.owner {
        let list: Vec<String> = owners.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "\nowner {region}: {}", list.join(" "));
    }
    for r in &ir.ranks {
        if !r.prologue.is_empty() {
            let _ = writeln!(
                out,
                "\nrank {} prologue, once before the first step ({} instructions)",
                r.rank,
                r.prologue.len()
            );
            for (k, i) in r.prologue.iter().enumerate() {
                let _ = writeln!(out, "  {k:>4}  {}", instr(i));
            }
        }
        let _ = writeln!(out, "\nrank {} ({} instructions)", r.rank, r.instructions.len());
        for (k, i) in r.instructions.iter().enumerate() {
            let _ = writeln!(out, "  {k:>4}  {}", instr(i));
        }
    }
    out
}
