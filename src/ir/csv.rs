//! schedule.csv: the compute-only schedule in torch.distributed.pipelining's CSV format, one
//! row per rank, `<stage><F|B|I|W><mb>` cells and `(a;b)OVERLAP_F_B` for overlapped pairs, as
//! `_PipelineScheduleRuntime._load_csv(format="compute_only")` reads it.

use std::fmt;
use std::io::{self, Write};

use super::{Instr, PlanIr};

struct Cell<'a>(&'a Instr);

impl fmt::Display for Cell<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.0;
        write!(f, "{}{}{}", i.stage.unwrap_or(0), i.op.torch_letter(), i.mb.unwrap_or(0))
    }
}

/// `None` when a region is replicated: torch's format has no replicated stages.
pub fn render(ir: &PlanIr) -> Option<String> {
    if !ir.all_sharded() {
        return None;
    }
    let mut out = Vec::new();
    write(ir, &mut out).expect("writing to memory cannot fail");
    Some(String::from_utf8(out).expect("schedule.csv is ASCII"))
}

/// schedule.csv into `out`, for a plan whose regions are all sharded.
pub fn write(ir: &PlanIr, out: &mut impl Write) -> io::Result<()> {
    for r in &ir.ranks {
        let mut compute = r.instructions.iter().filter(|i| i.op.is_compute()).peekable();
        let mut first = true;
        while let Some(i) = compute.next() {
            if !first {
                out.write_all(b",")?;
            }
            first = false;
            match compute.next_if(|n| i.overlap && n.overlap) {
                Some(n) => write!(out, "({};{})OVERLAP_F_B", Cell(i), Cell(n))?,
                None => write!(out, "{}", Cell(i))?,
            }
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}
