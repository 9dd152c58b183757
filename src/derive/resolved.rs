//! The resolved plan: the plan as written and every choice derive's search made where the plan
//! leaves one open (the encoder's form, chunk count, owner map and image splits, and where its
//! chunks run: the head delay, owners, backward ranks and slots; the sink's owners). [`super::choose`] makes it, [`super::lower`] turns it into per-rank lists as a
//! function of it alone, and plan.txt's header prints it. The simulator, the backends and the
//! IDE read it beside the IR, never derive's placement or order graph.

use std::borrow::Cow;

use super::nearest::TargetForm;
use super::owner::Schedule;
use crate::algebra::{Chunks, Layout, OwnerSpec, Skeleton, skeleton::body_skeleton};
use crate::check::resolved::Owners;
use crate::error::Error;
use crate::plan::Plan;

/// A plan as written, and what derive chose for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved<'p> {
    pub plan: &'p Plan,
    pub choices: Choices,
}

/// What derive chooses where the plan leaves it open. `Default` is a plan with nothing to
/// choose: no replicated region.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choices {
    /// The form the encoder (a replicated region at the source) runs in: the plan's own
    /// `transpose`, or HyperParallel's prefix form where that is faster.
    pub encoder: Option<Skeleton>,
    /// Chunks of the encoder's work (0: no encoder).
    pub chunks: u32,
    /// An owner map for the encoder in place of the plan's.
    pub encoder_owner: Option<OwnerSpec>,
    /// The owner map of a replicated region after the body, microbatch -> rank.
    pub sink: Option<Vec<u32>>,
    /// Per microbatch: the parts its images are split into across ranks (empty: all whole).
    pub parts: Vec<u32>,
    /// Where the encoder's chunks run (`fill = slack`): how long the first body stage waits
    /// for its first features (the head delay), each part's owner and the rank its backward
    /// runs on, and each chunk's slot in its rank's list.
    pub encoder_schedule: Option<Schedule>,
    /// The form a target runs in place of the plan as written (`nearest`): its body, where it
    /// puts the encoder and what that changes. The other choices are then made for that form.
    pub target: Option<TargetForm>,
}

impl Resolved<'_> {
    /// The plan with the target's form and the chosen encoder form written in: what lowering
    /// places.
    pub fn effective(&self) -> Cow<'_, Plan> {
        let plan = match &self.choices.target {
            Some(form) => Cow::Owned(form.written_into(self.plan)),
            None => Cow::Borrowed(self.plan),
        };
        match self.choices.encoder {
            Some(form) => {
                let mut plan = plan.into_owned();
                plan.schedule[0].skeleton = form;
                Cow::Owned(plan)
            }
            None => plan,
        }
    }

    /// What the checker's rules find wrong with the resolved plan: the plan as written with
    /// every choice written in as plan values (the target's form, the encoder's form with its
    /// chunk count fixed), with the owner maps and image parts the choices add. Each is a
    /// mistake of the search, not of the plan.
    pub fn problems(&self) -> Vec<Error> {
        let mut plan = self.effective().into_owned();
        let c = &self.choices;
        if let Some(Skeleton::Transpose { fill, lookahead, .. }) = c.encoder {
            plan.schedule[0].skeleton = Skeleton::Transpose { fill, lookahead, chunks: Chunks::Fixed(c.chunks) };
        }
        let jobs =
            if c.parts.is_empty() { plan.batch.microbatches } else { c.parts.iter().map(|&k| u64::from(k)).sum() };
        let mut owners = Vec::new();
        if let Some(s) = &c.encoder_schedule {
            owners.push(Owners { region: 0, ranks: &s.owners, entries: jobs });
            if !s.backward_owners.is_empty() {
                owners.push(Owners { region: 0, ranks: &s.backward_owners, entries: jobs });
            }
        }
        if let (Some(ranks), Some(region)) = (&c.sink, self.sink()) {
            owners.push(Owners { region, ranks, entries: plan.batch.microbatches });
        }
        crate::check::resolved::resolved(&plan, &owners, &c.parts)
    }

    /// The one skeleton the sharded regions run together as a pipeline, and its stages per
    /// rank: the target's, in its form.
    pub fn body(&self) -> (Skeleton, u32) {
        if let Some(form) = &self.choices.target {
            return form.body;
        }
        let sharded: Vec<Skeleton> =
            self.plan.schedule.iter().map(|s| s.skeleton).filter(|s| s.layout() == Layout::Sharded).collect();
        body_skeleton(&sharded).expect("the checker admits only plans with one body skeleton (E0317)")
    }

    /// The replicated region after the body, if any (a target's form has none: the targets
    /// that need a form refuse a sink).
    pub fn sink(&self) -> Option<usize> {
        let last = self.plan.schedule.len() - 1;
        let replicated = self.plan.schedule[last].skeleton.layout() == Layout::Replicated;
        (last > 0 && replicated && self.choices.target.is_none()).then_some(last)
    }

    /// The choices as plan.txt's header lists them, one line each; none for a plan with
    /// nothing to choose.
    pub fn describe(&self) -> Vec<String> {
        let c = &self.choices;
        let mut lines = Vec::new();
        if let Some(form) = c.encoder {
            let name = &self.plan.cut.regions[0].name;
            let written = self.plan.schedule[0].skeleton;
            let instead = if form == written { String::new() } else { format!(" (in place of `{written}`)") };
            lines.push(format!("{name} form: {form}{instead}"));
            lines.push(format!("{name} chunks: {}", c.chunks));
            let written = self.plan.owner.as_ref().unwrap_or(&OwnerSpec::ByMicrobatch);
            let owner = match &c.encoder_owner {
                Some(o) if o != written => format!("{} (in place of {})", owner_name(o), owner_name(written)),
                _ => owner_name(written),
            };
            lines.push(format!("{name} owner: {owner}"));
            if !c.parts.is_empty() {
                lines.push(format!("{name} image parts by microbatch: {}", joined(&c.parts)));
            }
            if let Some(s) = &c.encoder_schedule {
                lines.push(format!("{name} head delay: {:.3e} s", s.delay));
                if !s.backward_owners.is_empty() && s.backward_owners != s.owners {
                    lines.push(format!("{name} backward ranks by part: {}", joined(&s.backward_owners)));
                }
            }
        }
        if let (Some(owners), Some(i)) = (&c.sink, self.sink()) {
            lines.push(format!("{} owners by microbatch: {}", self.plan.cut.regions[i].name, joined(owners)));
        }
        lines
    }
}

fn owner_name(owner: &OwnerSpec) -> String {
    match owner {
        OwnerSpec::ByMicrobatch => "by_microbatch".into(),
        OwnerSpec::RoundRobin => "round_robin".into(),
        OwnerSpec::Adaptive => "adaptive".into(),
        OwnerSpec::Explicit(list) => format!("[{}]", list.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

fn joined(values: &[u32]) -> String {
    values.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}
