//! schedule.csv: the compute-only schedule in torch.distributed.pipelining's CSV format, one
//! row per rank, `<stage><F|B|I|W><mb>` cells and `(a;b)OVERLAP_F_B` for overlapped pairs, as
//! `_PipelineScheduleRuntime._load_csv(format="compute_only")` reads it.

use super::{Instr, PlanIr};

fn cell(i: &Instr) -> String {
    format!("{}{}{}", i.stage.unwrap_or(0), i.op.torch_letter(), i.mb.unwrap_or(0))
}

/// `None` when a region is replicated: torch's format has no replicated stages.
pub fn render(ir: &PlanIr) -> Option<String> {
    if !ir.all_sharded() {
        return None;
    }
    let mut out = String::new();
    for r in &ir.ranks {
        let compute: Vec<&Instr> = r.instructions.iter().filter(|i| i.op.is_compute()).collect();
        let mut cells = Vec::with_capacity(compute.len());
        let mut k = 0;
        while k < compute.len() {
            if compute[k].overlap && compute.get(k + 1).is_some_and(|n| n.overlap) {
                cells.push(format!("({};{})OVERLAP_F_B", cell(compute[k]), cell(compute[k + 1])));
                k += 2;
            } else {
                cells.push(cell(compute[k]));
                k += 1;
            }
        }
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    Some(out)
}
