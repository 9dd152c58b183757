//! plan.txt: the IR as a listing people read and the snapshots hold.

use std::fmt;
use std::io::{self, Write};

use super::{Dir, Group, Instr, Op, PlanIr};

/// One instruction as plan.txt shows it: `forward s1 mb0`, `send act s1 mb0 -> 2`,
/// `all_reduce pp enc`. A `Display` so the writers format it straight into their output.
pub struct Shown<'a>(pub &'a Instr);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.0;
        let (stage, mb, peer) = (i.stage.unwrap_or(0), i.mb.unwrap_or(0), i.peer.unwrap_or(0));
        let dir = match i.dir {
            Some(Dir::Act) => "act",
            Some(Dir::Grad) => "grad",
            None => "?",
        };
        match i.op {
            Op::Send => write!(f, "send {dir} s{stage} mb{mb} -> {peer}")?,
            Op::Recv => write!(f, "recv {dir} s{stage} mb{mb} <- {peer}")?,
            Op::AllReduce => {
                let group = match i.group {
                    Some(Group::Pp) => "pp",
                    Some(Group::Dp) => "dp",
                    None => "?",
                };
                write!(f, "all_reduce {group} {}", i.region.as_deref().unwrap_or(""))?;
                if let Some(bucket) = i.stage {
                    write!(f, " s{bucket}")?;
                }
                if i.asynchronous {
                    f.write_str(" (async)")?;
                }
            }
            Op::OptimizerStep => f.write_str("optimizer_step")?,
            op => write!(f, "{} s{stage} mb{mb}", op.name())?,
        }
        if let Some([lo, hi]) = i.images {
            write!(f, " images {lo}..{hi}")?;
        }
        match (i.overlap, i.step) {
            (true, _) => f.write_str(" (overlapped)"),
            (false, Some(ahead)) => write!(f, " (for step +{ahead})"),
            (false, None) => Ok(()),
        }
    }
}

pub fn instr(i: &Instr) -> String {
    Shown(i).to_string()
}

pub fn render(ir: &PlanIr) -> String {
    let mut out = Vec::new();
    write(ir, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("plan.txt is UTF-8")
}

/// plan.txt into `out`, one line at a time: a listing of a million instructions is never
/// held whole in memory.
pub fn write(ir: &PlanIr, out: &mut impl Write) -> io::Result<()> {
    write_with_choices(ir, &[], out)
}

/// plan.txt with the choices the lists were lowered with (one line each, as the resolved plan
/// describes them) in its header, after the pipeline.
pub fn write_with_choices(ir: &PlanIr, choices: &[String], out: &mut impl Write) -> io::Result<()> {
    let p = &ir.pipeline;
    writeln!(out, "{} v{}  {}", ir.format, ir.version, ir.source)?;
    write!(
        out,
        "pipeline: {} ranks, {} microbatches, dp {}, tp {}, {:?} mapping",
        p.ranks, p.microbatches, p.dp, p.tp, p.mapping
    )?;
    if p.images > 1 {
        write!(out, ", {} images a sequence", p.images)?;
    }
    writeln!(out)?;
    if !choices.is_empty() {
        writeln!(out, "\nchoices:")?;
        for choice in choices {
            writeln!(out, "  {choice}")?;
        }
    }
    writeln!(out, "\nregions:")?;
    for r in &ir.regions {
        let train = if r.trainable {
            "trainable"
        } else if r.backward {
            "frozen, backward"
        } else {
            "frozen"
        };
        writeln!(
            out,
            "  {:<12} {:<10} {:<16} {:<17} layers {}..{}",
            r.name,
            r.layout.to_string(),
            r.skeleton,
            train,
            r.layers[0],
            r.layers[1]
        )?;
    }
    writeln!(out, "\nstages:")?;
    for s in &ir.stages {
        let on = match s.rank {
            Some(r) => format!("rank {r}"),
            None => "all ranks".to_string(),
        };
        writeln!(out, "  {:>3}  {:<12} {:<9} layers {}..{}", s.id, s.region, on, s.layers[0], s.layers[1])?;
    }
    for (region, owners) in &ir.owner {
        write!(out, "\nowner {region}: ")?;
        for (k, o) in owners.iter().enumerate() {
            write!(out, "{}{o}", if k == 0 { "" } else { " " })?;
        }
        writeln!(out)?;
    }
    for r in &ir.ranks {
        if !r.prologue.is_empty() {
            writeln!(
                out,
                "
rank {} prologue, once before the first step ({} instructions)",
                r.rank,
                r.prologue.len()
            )?;
            for (k, i) in r.prologue.iter().enumerate() {
                writeln!(out, "  {k:>4}  {}", Shown(i))?;
            }
        }
        writeln!(
            out,
            "
rank {} ({} instructions)",
            r.rank,
            r.instructions.len()
        )?;
        for (k, i) in r.instructions.iter().enumerate() {
            writeln!(out, "  {k:>4}  {}", Shown(i))?;
        }
    }
    Ok(())
}
