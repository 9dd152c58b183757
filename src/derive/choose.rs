//! The search: what the plan leaves open, chosen by lowering each candidate and timing it with
//! the cost model's compute and transfer times. The encoder's form, chunk count, owner map and
//! image splits, a sink's owners, and last where the chosen encoder's chunks run (owner.rs's
//! list scheduling: head delay, owners, backward ranks, slots) come back as a [`Resolved`]
//! plan, which [`super::lower`] then lowers as it says. A target's nearest form is a choice too
//! ([`nearest`]): the same search, made for the plan in that form.

use super::nearest::TargetForm;
use super::owner::Schedule;
use super::placement;
use super::resolved::{Choices, Resolved};
use super::{Lowering, lower_with};
use crate::algebra::{Chunks, Fill, Layout, OwnerSpec, Skeleton};
use crate::cost::Costs;
use crate::ir::{Instr, Op};
use crate::plan::Plan;

/// Every choice the plan leaves open, each candidate lowered and timed.
pub fn choose<'p>(plan: &'p Plan, costs: &dyn Costs) -> Resolved<'p> {
    Resolved { plan, choices: search(plan, costs) }
}

/// The plan as `form` (a target's nearest form of `resolved`, [`super::nearest::form`]) runs it: the
/// written plan with that form and every choice open in it, made for it.
pub fn nearest<'p>(resolved: &Resolved<'p>, form: TargetForm, costs: &dyn Costs) -> Resolved<'p> {
    let plan = form.written_into(resolved.plan);
    Resolved { plan: resolved.plan, choices: Choices { target: Some(form), ..search(&plan, costs) } }
}

fn search(plan: &Plan, costs: &dyn Costs) -> Choices {
    let replicated: Vec<usize> =
        (0..plan.schedule.len()).filter(|&i| plan.schedule[i].skeleton.layout() == Layout::Replicated).collect();
    if replicated.is_empty() {
        return Choices::default();
    }
    let m = plan.batch.microbatches as u32;
    let p = plan.cluster.pp as u32;
    let round_robin: Vec<u32> = (0..m).map(|mb| mb % p).collect();
    let has_encoder = replicated.first() == Some(&0);
    let has_sink = replicated.last().is_some_and(|&i| i > 0);
    let mut choice = Choices::default();
    let mut plan = std::borrow::Cow::Borrowed(plan);
    if has_encoder {
        let probe = Choices { sink: has_sink.then(|| round_robin.clone()), ..Choices::default() };
        let (form, chosen) = encoder_form(&plan, costs, &probe);
        plan.to_mut().schedule[0].skeleton = form;
        choice = Choices { sink: None, encoder: Some(form), ..chosen };
    }
    if has_sink {
        let placed = placement::place_chunked(&plan, costs, choice.chunks);
        let last_rank = vec![placed.rank_of_body(placed.body.shape.stages() - 1); m as usize];
        let reversed: Vec<u32> = (0..m).map(|mb| p - 1 - mb % p).collect();
        let best = fastest(&[round_robin, reversed, last_rank], costs, |owners| {
            lower_with(&plan, costs, &Choices { sink: Some(owners.clone()), ..choice.clone() })
        });
        choice.sink = Some(best);
    }
    choice
}

/// The encoder's form that simulates fastest: the plan's own `transpose` with each chunk count
/// `chunks = auto` allows, and with `owner by_microbatch` also its round-robin map and
/// HyperParallel's prefix form, so that a plan never runs slower than either. Ties go to the
/// earlier candidate: fewer chunks, the plan's own form. The choices come with the fastest
/// candidate's encoder schedule: lowering with them again would find the same one, and the
/// sink's owners, placed after the encoder, do not move it.
fn encoder_form(plan: &Plan, costs: &dyn Costs, probe: &Choices) -> (Skeleton, Choices) {
    let written = plan.schedule[0].skeleton;
    let Skeleton::Transpose { fill, chunks, .. } = written else { unreachable!("the encoder is replicated") };
    let layers = plan.cut.regions[0].layers.end - plan.cut.regions[0].layers.start;
    let counts: Vec<u32> = match (chunks, fill) {
        (Chunks::Fixed(n), _) => vec![n],
        (Chunks::Auto, Fill::Prefix) => vec![1],
        (Chunks::Auto, Fill::Slack) => chunk_candidates(layers),
    };
    let by_microbatch = plan.owner.as_ref().is_none_or(|o| matches!(o, OwnerSpec::ByMicrobatch | OwnerSpec::Adaptive));
    let mut forms: Vec<(Skeleton, Option<OwnerSpec>, u32)> = counts.iter().map(|&n| (written, None, n)).collect();
    if by_microbatch && fill == Fill::Slack {
        forms.extend(counts.iter().map(|&n| (written, Some(OwnerSpec::RoundRobin), n)));
        forms.push((Skeleton::whole_transpose(Fill::Prefix), Some(OwnerSpec::RoundRobin), 1));
    }
    let timings = each_in_parallel(forms.len(), |i| {
        let (skeleton, owner, n) = &forms[i];
        let mut candidate = plan.clone();
        candidate.schedule[0].skeleton = *skeleton;
        if let Some(o) = owner {
            candidate.owner = Some(o.clone());
        }
        timed(&candidate, costs, &Choices { chunks: *n, ..probe.clone() })
    });
    let mut best: Option<(f64, usize, Option<Schedule>)> = None;
    for (i, (t, schedule)) in timings.into_iter().enumerate() {
        if best.as_ref().is_none_or(|(b, _, _)| t < b * (1.0 - 1e-6)) {
            best = Some((t, i, schedule));
        }
    }
    let (best, i, schedule) = best.expect("at least the plan's own form");
    let (skeleton, owner, n) = forms[i].clone();
    let chosen = Choices { chunks: n, encoder_owner: owner, encoder_schedule: schedule, ..probe.clone() };
    let mut candidate = plan.clone();
    candidate.schedule[0].skeleton = skeleton;
    let (split_step, parts, schedule) = image_splits(&candidate, &chosen, best, costs);
    if parts.is_empty() {
        return (skeleton, chosen);
    }
    // Parts are smaller than whole encodes: they may fit the idle time in fewer chunks.
    let mut best = (split_step, chosen.chunks, schedule);
    let others: Vec<u32> = counts.iter().copied().filter(|&n| n != chosen.chunks).collect();
    let timings = each_in_parallel(others.len(), |i| {
        timed(&candidate, costs, &Choices { chunks: others[i], parts: parts.clone(), ..searched(&chosen) })
    });
    for (&n, (t, schedule)) in others.iter().zip(timings) {
        if t < best.0 * (1.0 - 1e-6) {
            best = (t, n, schedule);
        }
    }
    (skeleton, Choices { parts, chunks: best.1, encoder_schedule: best.2, ..chosen })
}

/// `job(0..n)`, in order, run on as many threads as the machine has cores. Candidates are
/// independent lowerings of seconds each at tens of thousands of microbatches; each result is
/// computed as it would be alone, so the choice made from them is the same on any machine.
fn each_in_parallel<T: Send>(n: usize, job: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).min(n);
    if threads <= 1 {
        return (0..n).map(job).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n {
                            return done;
                        }
                        done.push((i, job(i)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a candidate's lowering does not panic")).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, t)| t).collect()
}

/// `choices` with the encoder's schedule left to the search: a candidate's own.
fn searched(choices: &Choices) -> Choices {
    Choices { encoder_schedule: None, ..choices.clone() }
}

/// Where splitting a microbatch's images across ranks pays: the first microbatches (their
/// encodes hold the body back) and, for a trainable encoder, the last ones (their backwards
/// end the step). For each end in turn: how many microbatches (1, 2, 4, … or all), each split
/// over as many ranks as the images allow, then over how many ranks (2, 4, …: fewer parts go
/// only where the idle time is), each timed against the best so far, starting from `unsplit`,
/// the step without any split.
fn image_splits(plan: &Plan, chosen: &Choices, unsplit: f64, costs: &dyn Costs) -> (f64, Vec<u32>, Option<Schedule>) {
    let none = || (unsplit, Vec::new(), chosen.encoder_schedule.clone());
    let Skeleton::Transpose { fill: Fill::Slack, lookahead: false, .. } = plan.schedule[0].skeleton else {
        return none();
    };
    let m = plan.batch.microbatches as usize;
    let most = (plan.batch.images as u32).min(plan.cluster.pp as u32);
    if most <= 1 {
        return none();
    }
    let trainable = plan.region_parts(0).any(|part| !part.frozen);
    let doubling =
        |limit: usize| std::iter::successors(Some(1usize), |n| n.checked_mul(2)).take_while(move |n| *n < limit);
    let counts: Vec<usize> = doubling(m).chain([m]).collect();
    let widths: Vec<u32> = doubling(most as usize).skip(1).map(|n| n as u32).collect();
    let mut best = (unsplit, vec![1; m], chosen.encoder_schedule.clone());
    let try_split = |best: &mut (f64, Vec<u32>, Option<Schedule>), split: Vec<u32>| {
        let (t, schedule) = timed(plan, costs, &Choices { parts: split.clone(), ..searched(chosen) });
        if t < best.0 * (1.0 - 1e-6) {
            *best = (t, split, schedule);
        }
    };
    let ends: &[bool] = if trainable { &[false, true] } else { &[false] };
    for &last in ends {
        let base = best.1.clone();
        let with = |j: usize, parts: u32| {
            let mut split = base.clone();
            split[if last { m - j..m } else { 0..j }].iter_mut().for_each(|k| *k = parts);
            split
        };
        for &j in &counts {
            try_split(&mut best, with(j, most));
        }
        let j = counts.iter().copied().find(|&j| best.1 == with(j, most));
        for (j, &parts) in j.into_iter().flat_map(|j| widths.iter().map(move |p| (j, p))) {
            try_split(&mut best, with(j, parts));
        }
    }
    if best.1.iter().all(|k| *k == 1) { none() } else { best }
}

/// Chunk counts worth trying for an encoder of `layers` layers: whole encodes, halvings down to
/// single layers, and one layer per chunk.
fn chunk_candidates(layers: u64) -> Vec<u32> {
    let layers = layers.max(1) as u32;
    let mut counts: Vec<u32> =
        std::iter::successors(Some(1u32), |n| n.checked_mul(2)).take_while(|n| *n < layers).collect();
    counts.push(layers);
    counts
}

/// The candidate whose derived plan runs fastest (compute and transfer times).
fn fastest(candidates: &[Vec<u32>], costs: &dyn Costs, lower: impl Fn(&Vec<u32>) -> Lowering) -> Vec<u32> {
    let mut best = (f64::INFINITY, 0usize);
    for (i, owners) in candidates.iter().enumerate() {
        let t = candidate_step(&lower(owners), costs);
        if t < best.0 * (1.0 - 1e-9) {
            best = (t, i);
        }
    }
    candidates[best.1].clone()
}

/// A candidate's step, and where its encoder's chunks went.
fn timed(plan: &Plan, costs: &dyn Costs, choices: &Choices) -> (f64, Option<Schedule>) {
    let lowering = lower_with(plan, costs, choices);
    let t = candidate_step(&lowering, costs);
    (t, lowering.transpose.and_then(|t| t.schedule))
}

/// The step of a derived plan as the cost model times its compute and transfers.
fn candidate_step(d: &Lowering, costs: &dyn Costs) -> f64 {
    let stages: Vec<std::ops::Range<u64>> = d.placement.stages.iter().map(|s| s.layers.clone()).collect();
    let images = d.ir.pipeline.images;
    crate::ir::interpret::run(&d.ir, &CandidateTimes { costs, stages: &stages, images })
        .map(|t| t.makespan())
        .unwrap_or(f64::INFINITY)
}

/// The cost model's compute and transfer times, without the collectives and the optimizer
/// step every candidate shares: how derive times a candidate.
struct CandidateTimes<'a> {
    costs: &'a dyn Costs,
    stages: &'a [std::ops::Range<u64>],
    images: u32,
}

impl CandidateTimes<'_> {
    fn flight(&self, from: u32, to: u32, i: &Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) => {
                self.costs.transfer(self.stages[s as usize].clone(), mb, i.share(self.images), from, to)
            }
            _ => 0.0,
        }
    }
}

impl crate::ir::interpret::Durations for CandidateTimes<'_> {
    fn instruction(&self, rank: u32, i: &Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) if i.op.is_compute() => {
                crate::cost::compute_time(self.costs, i.op, self.stages[s as usize].clone(), mb) * i.share(self.images)
            }
            _ if i.op == Op::Send && self.costs.send_occupies() => self.flight(rank, i.peer.unwrap_or(rank), i),
            _ => 0.0,
        }
    }

    fn transfer(&self, from: u32, to: u32, i: &Instr) -> f64 {
        self.flight(from, to, i)
    }
}
