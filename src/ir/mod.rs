//! The per-rank instruction IR: what `mpipec build` writes as plan.json. Field names are a
//! contract (docs/plan-json.md): add freely, rename none without bumping `version`.

pub mod compact;
pub mod csv;
pub mod interpret;
pub mod text;
pub mod validate;

use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "mpipe-ir";
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanIr {
    pub format: String,
    pub version: u32,
    pub source: String,
    pub pipeline: Pipeline,
    pub regions: Vec<RegionIr>,
    pub stages: Vec<StageIr>,
    /// Replicated region name -> owning rank of each microbatch.
    pub owner: std::collections::BTreeMap<String, Vec<u32>>,
    /// (dp, pp, tp) coordinates of every global rank, in Megatron's order (tp fastest, then dp, then pp).
    pub rank_map: Vec<RankCoord>,
    pub ranks: Vec<RankIr>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    pub ranks: u32,
    pub microbatches: u32,
    pub dp: u32,
    pub tp: u32,
    /// Stage index -> pipeline rank mapping style of the sharded stages: `loop` or `v`.
    pub mapping: Mapping,
    /// Images per sequence: what an encoder instruction's `images` range counts (absent: 1).
    #[serde(skip_serializing_if = "is_one", default = "one")]
    pub images: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn one() -> u32 {
    1
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mapping {
    Loop,
    V,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionIr {
    pub name: String,
    pub layout: crate::algebra::Layout,
    pub skeleton: String,
    pub trainable: bool,
    /// Whether backward events exist for this region (it or something upstream is trainable).
    pub backward: bool,
    pub layers: [u64; 2],
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageIr {
    pub id: u32,
    pub region: String,
    /// `"all"` for a replicated region's stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub layers: [u64; 2],
    /// Whether the stage runs backward: it holds a trainable layer or one is upstream of it.
    pub backward: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankCoord {
    pub global: u32,
    pub dp: u32,
    pub pp: u32,
    pub tp: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankIr {
    pub rank: u32,
    /// Run once, before the first step: a lookahead encoder's forwards of the first step's
    /// microbatches, whose features the first step then sends as every later step does.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub prologue: Vec<Instr>,
    pub instructions: Vec<Instr>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Forward,
    Backward,
    BackwardInput,
    BackwardWeight,
    Send,
    Recv,
    AllReduce,
    OptimizerStep,
}

impl Op {
    pub fn is_compute(self) -> bool {
        matches!(self, Op::Forward | Op::Backward | Op::BackwardInput | Op::BackwardWeight)
    }

    /// torch's letter for a compute op: `F`, `B`, `I`, `W`.
    pub fn torch_letter(self) -> &'static str {
        match self {
            Op::Forward => "F",
            Op::Backward => "B",
            Op::BackwardInput => "I",
            Op::BackwardWeight => "W",
            _ => unreachable!("only compute ops have a torch letter"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Forward => "forward",
            Op::Backward => "backward",
            Op::BackwardInput => "backward_input",
            Op::BackwardWeight => "backward_weight",
            Op::Send => "send",
            Op::Recv => "recv",
            Op::AllReduce => "all_reduce",
            Op::OptimizerStep => "optimizer_step",
        }
    }
}

/// What a send or receive carries: activations forward, gradients backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Act,
    Grad,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    /// The replicas of a replicated region: every pipeline rank.
    Pp,
    Dp,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Instr {
    pub op: Op,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<Dir>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<Group>,
    /// For `all_reduce`: the region whose gradients are reduced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Half of an overlapped forward/backward pair (DualPipeV): the forward comes first.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub overlap: bool,
    /// The step the instruction's work serves, counted from the step that runs it: `1` for a
    /// lookahead encoder's forward of the next step's microbatch. Absent: this step.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<u8>,
    /// An `all_reduce` the rank starts and does not wait for: it runs beside the rank's later
    /// work, and the rank waits for it before its `optimizer_step`.
    #[serde(rename = "async", skip_serializing_if = "std::ops::Not::not", default)]
    pub asynchronous: bool,
    /// A part of a microbatch's encode: images `[lo, hi)` of each of its sequences, on this
    /// rank; the first body stage gathers the parts in image order. Absent: all images.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub images: Option<[u32; 2]>,
}

impl Instr {
    /// `op` with no operands: what the constructors below fill in.
    fn bare(op: Op) -> Instr {
        Instr {
            op,
            stage: None,
            mb: None,
            peer: None,
            dir: None,
            group: None,
            region: None,
            overlap: false,
            step: None,
            asynchronous: false,
            images: None,
        }
    }

    pub fn compute(op: Op, stage: u32, mb: u32) -> Instr {
        Instr { stage: Some(stage), mb: Some(mb), ..Instr::bare(op) }
    }

    pub fn comm(op: Op, dir: Dir, stage: u32, mb: u32, peer: u32) -> Instr {
        Instr { peer: Some(peer), dir: Some(dir), ..Instr::compute(op, stage, mb) }
    }

    pub fn all_reduce(group: Group, region: &str) -> Instr {
        Instr { group: Some(group), region: Some(region.to_string()), ..Instr::bare(Op::AllReduce) }
    }

    /// The reduction of one stage's gradients over `group`, started as soon as the rank's last
    /// backward of that stage is done (a gradient bucket).
    pub fn all_reduce_bucket(group: Group, region: &str, stage: u32) -> Instr {
        Instr { stage: Some(stage), asynchronous: true, ..Instr::all_reduce(group, region) }
    }

    pub fn optimizer_step() -> Instr {
        Instr::bare(Op::OptimizerStep)
    }
}

impl Instr {
    /// The fraction of its microbatch's images the instruction's work or tensor covers.
    pub fn share(&self, images: u32) -> f64 {
        image_share(self.images, images)
    }
}

/// The fraction of a microbatch's `images` that the range `[lo, hi)` holds (all: `None`).
pub fn image_share(range: Option<[u32; 2]>, images: u32) -> f64 {
    range.map_or(1.0, |[lo, hi]| f64::from(hi.saturating_sub(lo)) / f64::from(images.max(1)))
}

impl PlanIr {
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out).expect("writing to memory cannot fail");
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// plan.json into `out`, straight from the derived `Serialize`: a field added to the IR is
    /// written with no edit here.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        out.write_all(b"\n")
    }

    pub fn stage(&self, id: u32) -> &StageIr {
        &self.stages[id as usize]
    }

    /// Whether every region is sharded: then torch's schedule CSV can express the plan.
    pub fn all_sharded(&self) -> bool {
        self.regions.iter().all(|r| r.layout == crate::algebra::Layout::Sharded)
    }
}
