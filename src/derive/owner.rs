//! Owners and places of a replicated encoder's work: list scheduling into the body's idle time.
//!
//! The body alone, timed, leaves each rank idle in windows: before its first event, between
//! events (the waits for an activation or a gradient), and after its last. When the first body
//! stage's first forward waits `delay` for its features, every body event moves later by that
//! delay, and so does every window but the first, which grows. Each microbatch is a job: its
//! encoder chunks run one after another on one owner, the forwards before the time the first
//! body stage needs the features (its deadline; none when the work serves the next step), a
//! trainable encoder's backwards after the feature gradient comes back (on the owner, or, for
//! a job that moves, on whichever rank ends the step earliest). Jobs are taken by
//! deadline, and each goes to the owner where it moves the end of the step least (work past a
//! rank's last body event may), then where it finishes earliest (its backward, when it has one); a
//! chunk goes into the first window it fits whole, so encoder work never delays a body event. The delay is the smallest for which every deadline is met; work that fits no window
//! runs after the rank's last body event.

use crate::algebra::OwnerSpec;

/// An idle stretch of a rank in the body-only schedule, in body time (before any delay).
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The chain position of the event the window precedes (the chain's length: after the last).
    pub before: usize,
    /// `None` for the window before the rank's first event: it starts at time zero and grows
    /// with the delay.
    pub from: Option<f64>,
    /// `f64::INFINITY` after the last event.
    pub to: f64,
}

/// One microbatch's encoder work.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Forward chunks in order.
    pub forward: Vec<f64>,
    /// Backward chunks in the order they run (the last chunk's first); empty when frozen.
    pub backward: Vec<f64>,
    /// When the first body stage needs the features, in body time; `None` for next-step work.
    pub deadline: Option<f64>,
    /// When the feature gradient is back on any owner, in body time.
    pub release: f64,
    /// The microbatch, and which part of its images this is (0 for a whole encode): the parts
    /// of one microbatch go to different ranks.
    pub mb: u32,
    pub part: u32,
    /// The backward may run on another rank than the forward (it recomputes from the chunks'
    /// inputs, which travel there); only where the owners are searched, not given.
    pub moves: bool,
}

/// Where one chunk runs: before which event of its owner's chain, from when.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slot {
    pub before: usize,
    pub start: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// How long the first body stage waits for its first features.
    pub delay: f64,
    /// When the last rank is done, body and encoder work, in the delayed timeline.
    pub end: f64,
    /// Where each job's forward runs, and where its backward does (the same rank unless the
    /// job moves).
    pub owners: Vec<u32>,
    pub backward_owners: Vec<u32>,
    pub forward: Vec<Vec<Slot>>,
    pub backward: Vec<Vec<Slot>>,
}

const EPS: f64 = 1e-12;

/// How hard the search for owners and slots tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effort {
    /// derive's: the least delay to within a millionth of itself, then one job moved at a time
    /// while that ends the step earlier.
    Full,
    /// One batch's plan, placed at every step: the greedy owners with the least delay,
    /// bracketed by doubling from the longest encode and found to within a thousandth of itself;
    /// where encoder work runs past the body's end, one pass of moving one job at a time, and
    /// the round-robin map with its least delay in its place if that ends earlier.
    Quick,
}

/// The schedule that ends the step earliest: the greedy owners with the smallest delay that
/// meets every deadline, then improved one job at a time (the plan's own owners stay fixed).
pub fn schedule(spec: &OwnerSpec, windows: &[Vec<Window>], jobs: &[Job]) -> Schedule {
    search(spec, windows, jobs, Effort::Full)
}

/// [`schedule`] with the given effort.
pub fn search(spec: &OwnerSpec, windows: &[Vec<Window>], jobs: &[Job], effort: Effort) -> Schedule {
    let ranks = windows.len() as u32;
    let round_robin = || -> Vec<u32> { jobs.iter().map(|j| (j.mb + j.part) % ranks).collect() };
    // A fixed map gives a microbatch's owner; its further parts go to the ranks after it.
    let fixed: Option<Vec<u32>> = match spec {
        OwnerSpec::RoundRobin => Some(round_robin()),
        OwnerSpec::Explicit(list) => Some(jobs.iter().map(|j| (list[j.mb as usize] as u32 + j.part) % ranks).collect()),
        OwnerSpec::ByMicrobatch | OwnerSpec::Adaptive => None,
    };
    let mut unbounded = usize::MAX;
    let greedy = least_delay(windows, jobs, fixed.as_deref(), (effort, &mut unbounded));
    // Moving a job can only shorten the step where encoder work runs past the body's end.
    let body_end = windows.iter().filter_map(|w| w.last()?.from).fold(0.0, f64::max) + greedy.delay;
    let searched = match fixed {
        None if greedy.end > body_end + EPS => improve(windows, jobs, greedy, effort),
        _ => return greedy,
    };
    if effort == Effort::Full {
        return searched;
    }
    // derive's search times the round-robin map beside these owners and keeps the faster; one
    // batch's plan has no such search, so the map is weighed here, by where the step ends.
    let by_rank = least_delay(windows, jobs, Some(&round_robin()), (effort, &mut unbounded));
    if by_rank.end < searched.end * (1.0 - 1e-9) { by_rank } else { searched }
}

/// The smallest delay that meets every deadline, bisected to within the effort's tolerance of
/// itself: a longer delay only widens the first windows and moves the deadlines later. Each
/// placement tried costs one of `budget`.
fn least_delay(
    windows: &[Vec<Window>],
    jobs: &[Job],
    fixed: Option<&[u32]>,
    (effort, budget): (Effort, &mut usize),
) -> Schedule {
    let order = by_deadline(jobs);
    let mut attempt = |delay: f64| {
        *budget = budget.saturating_sub(1);
        place_all(windows, (jobs, &order), fixed, delay)
    };
    if let Some(s) = attempt(0.0) {
        return s.schedule();
    }
    // Everything fits in front of the body once the delay covers all the work.
    let total = jobs.iter().map(|j| j.forward.iter().sum::<f64>()).sum::<f64>();
    let (mut lo, mut hi, mut found) = (0.0, total, None);
    let tolerance = match effort {
        Effort::Full => 1e-6,
        Effort::Quick => {
            // The delay is of the order of one encode, far below all of them: doubled from the
            // longest one, it is bracketed in a few placements.
            let mut guess = jobs.iter().map(|j| j.forward.iter().sum::<f64>()).fold(0.0, f64::max);
            while guess > 0.0 && guess < total && found.is_none() {
                match attempt(guess) {
                    Some(s) => (hi, found) = (guess, Some(s)),
                    None => (lo, guess) = (guess, guess * 2.0),
                }
            }
            1e-3
        }
    };
    let mut best =
        found.unwrap_or_else(|| attempt(hi).expect("with the whole encoder work as delay every job fits in front"));
    for _ in 0..40 {
        if hi - lo <= tolerance * hi.max(EPS) {
            break;
        }
        let mid = (lo + hi) / 2.0;
        match attempt(mid) {
            Some(s) => {
                best = s;
                hi = mid;
            }
            None => lo = mid,
        }
    }
    best.schedule()
}

/// Local improvement: move one job at a time to another owner, the others keeping theirs,
/// while that ends the step earlier, each owner map placed with `effort`'s least delay.
/// Later jobs first: their backwards end the step. Bounded in placements tried, so that
/// large plans stay fast.
fn improve(windows: &[Vec<Window>], jobs: &[Job], mut best: Schedule, effort: Effort) -> Schedule {
    let ranks = windows.len() as u32;
    let chunks: usize = jobs.iter().map(|j| j.forward.len() + j.backward.len()).sum();
    let mut budget = 1_000_000 / chunks.max(1);
    // The quick search makes one pass over the jobs: on the plans measured (docs/transpose.md)
    // it kept all that further passes gained, in half the placements.
    let mut passes = match effort {
        Effort::Full => usize::MAX,
        Effort::Quick => 1,
    };
    let mut improved = true;
    while improved && budget > 0 && passes > 0 {
        passes -= 1;
        improved = false;
        for mb in (0..jobs.len()).rev() {
            for r in 0..ranks {
                let sibling = |o: usize| o != mb && jobs[o].mb == jobs[mb].mb && best.owners[o] == r;
                if r == best.owners[mb] || (0..jobs.len()).any(sibling) {
                    continue;
                }
                if budget == 0 {
                    return best;
                }
                let mut owners = best.owners.clone();
                owners[mb] = r;
                let candidate = least_delay(windows, jobs, Some(&owners), (effort, &mut budget));
                if candidate.end < best.end * (1.0 - 1e-9) {
                    best = candidate;
                    improved = true;
                }
            }
        }
    }
    best
}

/// The jobs in the order they are placed: by deadline (by release without one), then as given.
fn by_deadline(jobs: &[Job]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    let key = |j: &Job| j.deadline.unwrap_or(j.release);
    order.sort_by(|&a, &b| key(&jobs[a]).total_cmp(&key(&jobs[b])).then(a.cmp(&b)));
    order
}

/// One placement of every job: its schedule but for the slots, which are in one list, a job's
/// forwards at `slots[a..b]` and backwards at `slots[b..c]` for `at[job] = [a, b, c]`. Only
/// the attempt the search keeps is made a [`Schedule`]: lists per job for every attempt cost
/// about as much as placing.
struct Attempt {
    schedule: Schedule,
    slots: Vec<Slot>,
    at: Vec<[usize; 3]>,
}

impl Attempt {
    fn schedule(self) -> Schedule {
        let Attempt { mut schedule, slots, at } = self;
        schedule.forward = at.iter().map(|[a, b, _]| slots[*a..*b].to_vec()).collect();
        schedule.backward = at.iter().map(|[_, b, c]| slots[*b..*c].to_vec()).collect();
        schedule
    }
}

/// Every job placed, in `order` ([`by_deadline`]), with the body delayed by `delay`; `None`
/// when a deadline is missed.
fn place_all(
    windows: &[Vec<Window>],
    (jobs, order): (&[Job], &[usize]),
    fixed: Option<&[u32]>,
    delay: f64,
) -> Option<Attempt> {
    let mut lanes: Vec<Lane> = windows.iter().map(|w| Lane::new(w, delay)).collect();
    let mut schedule = Schedule {
        delay,
        end: 0.0,
        owners: vec![0; jobs.len()],
        backward_owners: vec![0; jobs.len()],
        forward: Vec::new(),
        backward: Vec::new(),
    };
    let chunks = jobs.iter().map(|j| j.forward.len() + j.backward.len()).sum();
    let (mut slots, mut at) = (Vec::with_capacity(chunks), vec![[0; 3]; jobs.len()]);
    let (mut fits, mut candidates) = (Fits::default(), Vec::with_capacity(lanes.len()));
    for &mb in order {
        let job = &jobs[mb];
        // Parts of one microbatch are placed one after another (same deadline, adjacent), each
        // forward on its own rank and each backward on its own rank.
        let siblings: Vec<usize> = (0..mb).rev().take_while(|&o| jobs[o].mb == job.mb).collect();
        candidates.clear();
        match fixed {
            Some(f) => candidates.push(f[mb]),
            None => candidates
                .extend((0..lanes.len() as u32).filter(|r| !siblings.iter().any(|&o| schedule.owners[o] == *r))),
        }
        // A backward that may move is placed on its own once the forward is.
        let apart = job.moves && fixed.is_none() && !job.backward.is_empty();
        let backward = if apart { &[][..] } else { &job.backward[..] };
        let r = best_fit(&lanes, &candidates, (&job.forward, backward), job, delay, &mut fits)?;
        lanes[r as usize].take(&job.forward, &fits.best_ahead);
        at[mb][0] = slots.len();
        slots.extend(fits.best_ahead.iter().map(|&(w, start)| lanes[r as usize].slot(w, start)));
        let mut q = r;
        if apart {
            // The forward's rank first: on a tie the backward stays, and nothing travels.
            candidates.clear();
            candidates.extend(
                std::iter::once(r)
                    .chain((0..lanes.len() as u32).filter(|&q| q != r))
                    .filter(|q| !siblings.iter().any(|&o| schedule.backward_owners[o] == *q)),
            );
            q = best_fit(&lanes, &candidates, (&[], &job.backward), job, delay, &mut fits)?;
        }
        lanes[q as usize].take(&job.backward, &fits.best_behind);
        schedule.owners[mb] = r;
        schedule.backward_owners[mb] = q;
        at[mb][1] = slots.len();
        slots.extend(fits.best_behind.iter().map(|&(w, start)| lanes[q as usize].slot(w, start)));
        at[mb][2] = slots.len();
    }
    schedule.end = lanes.iter().map(|l| l.end).fold(0.0, f64::max);
    Some(Attempt { schedule, slots, at })
}

/// (window, start) of each chunk fitted into a lane.
type Fitted = Vec<(usize, f64)>;

/// What [`best_fit`] fits a job into, kept from job to job: allocating them for every rank
/// tried was much of the time spent placing.
#[derive(Default)]
struct Fits {
    /// The rank being tried: its forward and backward chunks, and when the forward's end.
    ahead: Fitted,
    behind: Fitted,
    ends: Fitted,
    /// The best rank so far.
    best_ahead: Fitted,
    best_behind: Fitted,
}

/// The candidate rank where `forward` then `backward` (either may be empty) move the end of the
/// step least, then finish earliest, with its chunks in `fits.best_ahead` and
/// `fits.best_behind`; ties go to the earlier rank. `None` when no candidate meets the job's
/// deadline.
fn best_fit(
    lanes: &[Lane],
    candidates: &[u32],
    (forward, backward): (&[f64], &[f64]),
    job: &Job,
    delay: f64,
    fits: &mut Fits,
) -> Option<u32> {
    let step_end = lanes.iter().map(|l| l.end).fold(0.0, f64::max);
    let mut best: Option<((f64, f64), u32)> = None;
    for &r in candidates {
        let lane = &lanes[r as usize];
        // The chunks end one after another, so a rank is given up at the first that ends past
        // the deadline, or, of the job's last chunks, no earlier than the best rank's finish:
        // it could not be better.
        let best_finish = best.map_or(f64::INFINITY, |b| b.0.1);
        let deadline = job.deadline.filter(|_| !forward.is_empty()).map_or(f64::INFINITY, |d| d + delay + EPS);
        let last = if backward.is_empty() { best_finish } else { f64::INFINITY };
        let Some(done) = lane.fit(forward, 0.0, &[], |t| t > deadline || t >= last, &mut fits.ahead) else { continue };
        fits.behind.clear();
        let finish = if backward.is_empty() {
            done
        } else {
            fits.ends.clear();
            fits.ends.extend(fits.ahead.iter().zip(forward).map(|((w, s), c)| (*w, s + c)));
            let Some(finish) =
                lane.fit(backward, job.release + delay, &fits.ends, |t| t >= best_finish, &mut fits.behind)
            else {
                continue;
            };
            finish
        };
        // The step ends with the last rank: first keep that end low, then the job's.
        let score = (step_end.max(finish), finish);
        let better = |b: &(f64, f64)| score.0 < b.0 - EPS || (score.0 <= b.0 + EPS && score.1 < b.1 - EPS);
        if best.is_none_or(|b| better(&b.0)) {
            best = Some((score, r));
            std::mem::swap(&mut fits.ahead, &mut fits.best_ahead);
            std::mem::swap(&mut fits.behind, &mut fits.best_behind);
        }
    }
    best.map(|(_, r)| r)
}

/// One rank's windows with the delay applied, and how far each is filled.
struct Lane<'a> {
    windows: &'a [Window],
    to: Vec<f64>,
    used: Vec<f64>,
    /// Each window's room left, `to - used`: a chunk skips the windows too full for it in log
    /// time, where a scan past them made placing quadratic in microbatches.
    room: Room,
    /// When the rank is done: its last body event, or the encoder work after it.
    end: f64,
}

impl<'a> Lane<'a> {
    fn new(windows: &'a [Window], delay: f64) -> Lane<'a> {
        let from: Vec<f64> = windows.iter().map(|w| w.from.map_or(0.0, |f| f + delay)).collect();
        let to = windows.iter().map(|w| w.to + delay).collect();
        let end = from.last().copied().unwrap_or(0.0);
        let room = Room::new(from.iter().zip(&to).map(|(f, t)| t - f).collect());
        Lane { windows, used: from, to, room, end }
    }

    /// Where `chunks` would run one after another from `earliest` on, (window, start) of each,
    /// and when the last ends. `pending` are (window, end) of chunks fitted but not yet taken,
    /// in the order they run (so by window). The chunks fitted here run one after another, so
    /// the last one's end is past all the others: only `pending` and the lane's fill can hold
    /// a chunk back further. `None` once a chunk ends at a time `gives_up` rejects, which
    /// rejects every later time too. The places go into `at`.
    fn fit(
        &self,
        chunks: &[f64],
        earliest: f64,
        pending: &[(usize, f64)],
        gives_up: impl Fn(f64) -> bool,
        at: &mut Fitted,
    ) -> Option<f64> {
        at.clear();
        let mut t = earliest;
        // Most fits start at time zero, in the first window: a search of every window there
        // read a lane's whole window list for each rank of each job.
        let mut w = if self.to[0] <= t + EPS { self.to.partition_point(|&to| to <= t + EPS) } else { 0 };
        let mut p = 0;
        for &c in chunks {
            loop {
                while p < pending.len() && pending[p].0 < w {
                    p += 1;
                }
                let here = pending[p..].iter().take_while(|(pw, _)| *pw == w);
                let start = here.fold(self.used[w], |u, (_, e)| u.max(*e)).max(t);
                if start + c <= self.to[w] + EPS || w + 1 == self.to.len() {
                    let waited = at.is_empty() || start > t;
                    at.push((w, start));
                    t = start + c;
                    // Each later chunk starts no earlier than the one before it ends, and
                    // rounding keeps order: back to back from here they end no later than they
                    // will, so a rank given up then is given up now, without fitting the rest.
                    // Only a chunk that waited moves that end; the first sets it.
                    let soonest = if waited { chunks[at.len()..].iter().fold(t, |t, c| t + c) } else { t };
                    if gives_up(soonest) {
                        return None;
                    }
                    break;
                }
                // Past the window `t` falls in a chunk starts no earlier than a window's fill,
                // so one without room for it cannot hold it; the last window always does.
                w = self.room.first_with(w + 1, c - ROOM_TOLERANCE).unwrap_or(self.to.len() - 1);
            }
        }
        Some(t)
    }

    fn take(&mut self, chunks: &[f64], at: &[(usize, f64)]) {
        for (&c, &(w, start)) in chunks.iter().zip(at) {
            self.used[w] = self.used[w].max(start + c);
            self.end = self.end.max(start + c);
        }
        // Consecutive chunks mostly share a window: its room is set once.
        for (k, &(w, _)) in at.iter().enumerate() {
            if at.get(k + 1).is_none_or(|next| next.0 != w) {
                self.room.set(w, self.to[w] - self.used[w]);
            }
        }
    }

    fn slot(&self, w: usize, start: f64) -> Slot {
        Slot { before: self.windows[w].before, start }
    }
}

/// How far below a chunk's length a window's room may be and still be tried: the room is a
/// difference of times, rounded, and the fit itself is decided on the times with [`EPS`].
const ROOM_TOLERANCE: f64 = 1e-9;

/// A max tree over values by index: the first index at or after a given one whose value
/// reaches a bound, in log time.
struct Room {
    /// Leaves from `leaves` on, each inner node the larger of its two children.
    tree: Vec<f64>,
    leaves: usize,
}

impl Room {
    fn new(values: Vec<f64>) -> Room {
        let leaves = values.len().next_power_of_two();
        let mut tree = vec![f64::NEG_INFINITY; 2 * leaves];
        tree[leaves..leaves + values.len()].copy_from_slice(&values);
        for i in (1..leaves).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        Room { tree, leaves }
    }

    fn set(&mut self, index: usize, value: f64) {
        let mut i = self.leaves + index;
        self.tree[i] = value;
        while i > 1 {
            i /= 2;
            let larger = self.tree[2 * i].max(self.tree[2 * i + 1]);
            // An unchanged node leaves every node above it as it is.
            if self.tree[i] == larger {
                break;
            }
            self.tree[i] = larger;
        }
    }

    /// The first index at or after `from` whose value is at least `bound`.
    fn first_with(&self, from: usize, bound: f64) -> Option<usize> {
        if from >= self.leaves {
            return None;
        }
        // Climb from the leaf while no node to the right of the path can hold it, then descend.
        let mut i = self.leaves + from;
        if self.tree[i] >= bound {
            return Some(from);
        }
        loop {
            // Move to the next subtree to the right: up while `i` is a right child.
            while i % 2 == 1 {
                i /= 2;
                if i == 0 {
                    return None;
                }
            }
            i += 1;
            if self.tree[i] >= bound {
                break;
            }
        }
        while i < self.leaves {
            i = if self.tree[2 * i] >= bound { 2 * i } else { 2 * i + 1 };
        }
        Some(i - self.leaves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(before: usize, from: Option<f64>, to: f64) -> Window {
        Window { before, from, to }
    }

    fn frozen(chunks: &[f64], deadline: f64) -> Job {
        Job {
            forward: chunks.to_vec(),
            backward: Vec::new(),
            deadline: Some(deadline),
            release: 0.0,
            mb: 0,
            part: 0,
            moves: false,
        }
    }

    /// One forward unit due at 1, two backward units released at `release`.
    fn trained(release: f64, moves: bool) -> Job {
        Job { backward: vec![2.0], release, moves, ..frozen(&[1.0], 1.0) }
    }

    #[test]
    fn room_finds_what_a_scan_finds() {
        let values: Vec<f64> = (0..37u32).map(|i| f64::from((i * 7919) % 23)).collect();
        let mut room = Room::new(values.clone());
        let mut values = values;
        for step in 0..60usize {
            let (i, v) = ((step * 13) % values.len(), f64::from((step as u32 * 31) % 29));
            values[i] = v;
            room.set(i, v);
            for from in 0..=values.len() {
                for bound in [0.0, 5.0, 17.5, 22.0, 28.0, 40.0] {
                    let scan = (from..values.len()).find(|&k| values[k] >= bound);
                    assert_eq!(room.first_with(from, bound), scan, "from {from}, bound {bound}");
                }
            }
        }
    }

    #[test]
    fn chunks_fill_gaps_a_whole_encode_cannot() {
        // One rank, idle 1 unit before its first event and 1 unit between events 1 and 2.
        let windows = vec![vec![window(0, None, 1.0), window(2, Some(2.0), 3.0), window(3, Some(4.0), f64::INFINITY)]];
        let whole = schedule(&OwnerSpec::ByMicrobatch, &windows, &[frozen(&[2.0], 3.0)]);
        assert!((whole.delay - 1.0).abs() < 1e-6, "a whole encode of 2 needs the front widened: {}", whole.delay);
        let split = schedule(&OwnerSpec::ByMicrobatch, &windows, &[frozen(&[1.0, 1.0], 3.0)]);
        assert_eq!(split.delay, 0.0);
        assert_eq!(split.forward[0], [Slot { before: 0, start: 0.0 }, Slot { before: 2, start: 2.0 }]);
    }

    #[test]
    fn each_job_goes_where_it_finishes_first() {
        // Rank 0 idles 1 unit before its event at [1, 2); rank 1 idles 3 before [3, 4).
        let windows = vec![
            vec![window(0, None, 1.0), window(1, Some(2.0), f64::INFINITY)],
            vec![window(0, None, 3.0), window(1, Some(4.0), f64::INFINITY)],
        ];
        let jobs: Vec<Job> = [(1.0, 0), (2.0, 1), (2.5, 2)]
            .into_iter()
            .map(|(deadline, mb)| Job { mb, ..frozen(&[1.0], deadline) })
            .collect();
        let s = schedule(&OwnerSpec::ByMicrobatch, &windows, &jobs);
        assert_eq!(s.delay, 0.0);
        assert_eq!(s.owners, [0, 1, 1]);
        let fixed = schedule(&OwnerSpec::RoundRobin, &windows, &jobs);
        assert_eq!(fixed.owners, [0, 1, 0]);
        assert!(fixed.delay > 0.99, "rank 0 must widen its front for its second encode: {}", fixed.delay);
    }

    #[test]
    fn parts_of_one_microbatch_go_to_different_ranks() {
        // Both ranks idle 1 unit before their first event; two halves of one encode, due at 1.
        let windows = vec![vec![window(0, None, 1.0), window(1, Some(2.0), f64::INFINITY)]; 2];
        let jobs: Vec<Job> = (0..2).map(|part| Job { part, ..frozen(&[1.0], 1.0) }).collect();
        let s = schedule(&OwnerSpec::ByMicrobatch, &windows, &jobs);
        assert_eq!(s.delay, 0.0);
        assert_eq!(s.owners, [0, 1]);
    }

    #[test]
    fn a_backward_that_moves_goes_where_the_step_ends_first() {
        // Rank 0 idles before its event at [1, 2), 1 unit in [2, 3), and after 6; rank 1 is
        // busy until 4. The forward (due at 1) fits only rank 0's front; its backward (2 units,
        // released at 2) would wait there until 6.
        let windows = vec![
            vec![window(0, None, 1.0), window(1, Some(2.0), 3.0), window(2, Some(6.0), f64::INFINITY)],
            vec![window(0, None, 0.0), window(1, Some(4.0), f64::INFINITY)],
        ];
        let job = |moves| trained(2.0, moves);
        let moved = schedule(&OwnerSpec::ByMicrobatch, &windows, &[job(true)]);
        assert_eq!((moved.owners[0], moved.backward_owners[0], moved.delay), (0, 1, 0.0));
        assert_eq!(moved.backward[0], [Slot { before: 1, start: 4.0 }]);
        assert_eq!(moved.end, 6.0);
        // Kept together, the job either waits on rank 0 (ends at 8) or delays the body by 1 to
        // fit rank 1's front: 7.
        let kept = schedule(&OwnerSpec::ByMicrobatch, &windows, &[job(false)]);
        assert_eq!((kept.owners[0], kept.backward_owners[0]), (1, 1));
        assert!((kept.end - 7.0).abs() < 1e-5, "{}", kept.end);
        // A given owner map keeps the backward with its forward.
        let fixed = schedule(&OwnerSpec::RoundRobin, &windows, &[job(true)]);
        assert_eq!(fixed.backward_owners, [0]);
    }

    #[test]
    fn backward_runs_after_its_release_on_the_owner() {
        let windows = vec![vec![window(0, None, 1.0), window(1, Some(5.0), f64::INFINITY)]];
        let job = trained(6.0, false);
        let s = schedule(&OwnerSpec::ByMicrobatch, &windows, &[job]);
        assert_eq!(s.backward[0], [Slot { before: 1, start: 6.0 }]);
    }
}
