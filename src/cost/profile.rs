//! The profile's numbers laid over a plan's layers (`crate::profile`): what the cost model asks
//! before its formulas, and what the simulator adds per instruction for the runtime.

use std::ops::Range;
use std::sync::Arc;

use crate::plan::Plan;
use crate::profile::{LayerProfile, Profile};

/// The most gradient bytes the torch runtime reduces in one call (mpipec.torch.executor's
/// BUCKET_BYTES, DDP's default bucket).
pub const BUCKET_BYTES: f64 = 25.0 * 1024.0 * 1024.0;

/// The profile's numbers laid over a plan's layers: what the cost model asks first.
#[derive(Clone, Debug)]
pub struct Measured {
    pub profile: Arc<Profile>,
    /// Per global layer: its kind's numbers, when the profile has them.
    layers: Vec<Option<LayerProfile>>,
    /// The core time each receive is charged on this plan's host beyond its instruction (the
    /// receiving threads' CPU, where the ranks contend for the cores; else 0).
    receive_work: f64,
}

impl Measured {
    pub fn new(profile: Arc<Profile>, plan: &Plan) -> Measured {
        let layers =
            plan.model.layer_kinds(profile.miniature()).iter().map(|k| profile.layers.get(k).copied()).collect();
        let mut measured = Measured { profile, layers, receive_work: 0.0 };
        measured.receive_work = measured
            .shared(plan.cluster.dp)
            .filter(|s| s.contended(plan.cluster.pp as usize))
            .map_or(0.0, |s| s.message_cpu);
        measured
    }

    pub fn layer(&self, layer: u64) -> Option<&LayerProfile> {
        self.layers.get(layer as usize).and_then(Option::as_ref)
    }

    /// A message of `share` of the output of `last`, the stage's last layer: α + n/β. The
    /// profile's α is a message's delivery to a rank waiting for it, the receiving threads woken
    /// in turn; where the ranks contend for the cores the receive is charged those threads'
    /// work (`receive_work`) once the message is there, so the flight is what the delivery
    /// takes beyond it: counted once.
    pub fn transfer(&self, last: u64, share: f64) -> Option<f64> {
        let (p2p, layer) = (self.profile.p2p?, self.layer(last)?);
        Some((p2p.alpha_s - self.receive_work).max(0.0) + layer.output_bytes * share / p2p.beta_bytes_per_s)
    }

    /// The runtime's reduction of the gradients of `layers` over a ring of `k` ranks of
    /// `group`: one call per bucket of at most [`BUCKET_BYTES`] (the runtime flattens an
    /// instruction's gradients into buckets that size).
    pub fn all_reduce(&self, layers: &[Range<u64>], group: &str, k: u64) -> Option<f64> {
        if k <= 1 {
            return Some(0.0);
        }
        let ring = self.profile.all_reduce.get(group)?;
        let bytes: f64 =
            layers.iter().flat_map(|l| l.clone()).map(|l| Some(self.layer(l)?.grad_bytes)).sum::<Option<f64>>()?;
        let (k, calls) = (k as f64, (bytes / BUCKET_BYTES).ceil().max(1.0));
        Some(calls * 2.0 * (k - 1.0) * ring.alpha_s + 2.0 * (k - 1.0) / k * bytes / ring.beta_bytes_per_s)
    }

    /// The optimizer step over `layers`' parameters.
    pub fn optimizer(&self, layers: Range<u64>) -> Option<f64> {
        layers.map(|l| self.layer(l)?.optimizer_s).sum()
    }

    /// What a compute instruction of `op` costs once however many layers it runs, beyond its
    /// layers' times (0 for any other op, and from older profiles).
    pub fn call(&self, op: crate::ir::Op) -> f64 {
        use crate::ir::Op;
        let Some(c) = self.profile.runtime.map(|r| r.call) else { return 0.0 };
        match op {
            Op::Forward => c.forward_s,
            Op::Backward => c.backward_s,
            Op::BackwardInput => c.backward_input_s,
            Op::BackwardWeight => c.backward_weight_s,
            _ => 0.0,
        }
    }

    /// What the runtime adds to one instruction of `op`.
    pub fn overhead(&self, op: crate::ir::Op) -> f64 {
        use crate::ir::Op;
        let Some(r) = self.profile.runtime else { return 0.0 };
        r.instruction_s
            + match op {
                op if op.is_compute() => r.compute_s,
                Op::Send => r.send_s,
                Op::Recv => r.recv_s,
                _ => 0.0,
            }
    }

    /// Where the profile was taken on a CPU and says its host's cores: the plan's ranks are
    /// processes sharing such a host's cores, as they did when measured, `replicas` processes
    /// (data-parallel) for each simulated rank.
    pub fn shared(&self, replicas: u64) -> Option<crate::ir::interpret::Shared> {
        let host = self.profile.host.filter(|_| self.profile.device_type == "cpu")?;
        Some(crate::ir::interpret::Shared {
            cores: host.cores as f64,
            threads: host.threads as f64,
            replicas: replicas.max(1) as f64,
            message_cpu: self.profile.runtime.map_or(0.0, |r| r.message_cpu_s),
            send_wait: self.profile.runtime.map_or(0.0, |r| r.send_wait_s),
            balance: host.balance_s,
            slice: host.slice_s,
        })
    }

    /// Which of the plan's costs come from the profile and which from the analytic model,
    /// one phrase each, for `sim` to say.
    pub fn coverage(&self, plan: &Plan) -> (Vec<String>, Vec<String>) {
        let p = &self.profile;
        let (mut measured, mut analytic) = (Vec::new(), Vec::new());
        let kinds = plan.model.layer_kinds(p.miniature());
        let mut seen: Vec<&String> = Vec::new();
        for k in &kinds {
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        let (have, lack): (Vec<&String>, Vec<&String>) = seen.into_iter().partition(|k| p.layers.contains_key(*k));
        let list = |ks: Vec<&String>| ks.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        if !have.is_empty() {
            measured.push(format!("compute of {}", list(have)));
        }
        if !lack.is_empty() {
            analytic.push(format!("compute of {}", list(lack)));
        }
        let mut sort = |measured_here: bool, what: String| {
            if measured_here { measured.push(what) } else { analytic.push(what) }
        };
        sort(p.p2p.is_some(), "point-to-point transfers".into());
        sort(p.all_reduce.contains_key("pp"), "all-reduce over pp".into());
        if plan.cluster.dp > 1 {
            sort(p.all_reduce.contains_key("dp"), "all-reduce over dp".into());
        }
        sort(p.runtime.is_some(), "the runtime's per-instruction costs".into());
        if let Some(s) = self.shared(plan.cluster.dp) {
            let how = p.host.and_then(|h| h.scheduling()).map_or(String::new(), |how| format!(", {how}"));
            measured.push(format!("the ranks' processes sharing {} cores{how}", s.cores));
        }
        if p.speed().is_some() {
            measured
                .push("the host's speed over the profile's run (the step the median of runs drawn through it)".into());
        }
        (measured, analytic)
    }
}
