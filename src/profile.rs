//! A profile: the costs `mpipec profile` measured (docs/costs.md), parsed from the file's text.
//! The checker gets the text through the loader and puts the profile in the plan's cluster; the
//! cost model (`cost::profile`) takes its numbers in place of the analytic ones.
//!
//! A layer's kind is what it is in the model the profile ran: the architecture's name (the
//! miniature's layers are all one size, so there `encoder` or `decoder`) and, where a part's
//! first or last layer carries the embedding, the head, the patch embedding or the merger, its
//! role (`llm:first`, `llm:last`, `llm:only` for a part of one layer).

use std::collections::BTreeMap;

use serde_json::Value;

/// What the profile measured of one layer kind, for one microbatch at the profile's shapes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerProfile {
    pub forward_s: f64,
    pub backward_input_s: f64,
    pub backward_weight_s: f64,
    /// Both halves as one pass (a schedule's fused backward), when measured.
    pub backward_s: Option<f64>,
    /// The optimizer step over the kind's parameters, as the runtime runs it.
    pub optimizer_s: Option<f64>,
    /// The activation the layer hands on (a send's payload) and its gradients.
    pub output_bytes: f64,
    pub grad_bytes: f64,
}

/// What the runtime costs beyond its kernels, per instruction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Runtime {
    /// The loop between instructions: every instruction pays it.
    pub instruction_s: f64,
    /// A compute instruction beyond its layers' kernels (inputs, autograd set-up).
    pub compute_s: f64,
    /// Posting a send.
    pub send_s: f64,
    /// A receive whose message is already there.
    pub recv_s: f64,
    /// CPU seconds the process's other threads (its receiving threads, gloo's) spend per message
    /// it receives: work that needs a core where the ranks share a host's. Older profiles lack
    /// it (0).
    pub message_cpu_s: f64,
    /// How long a message waits, at most, for the sending process's thread while the process
    /// goes on computing (on a CPU host the thread needs a core). Older profiles lack it (0).
    pub send_wait_s: f64,
    /// What each compute op costs once an instruction however many layers it runs (an autograd
    /// call's start), which the layers' times are given less of. Older profiles lack it (0, and
    /// their layers' times hold it).
    pub call: Calls,
}

/// Seconds per compute op: a forward, a fused backward and the two halves of a split one.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Calls {
    pub forward_s: f64,
    pub backward_s: f64,
    pub backward_input_s: f64,
    pub backward_weight_s: f64,
}

impl Calls {
    fn scaled(&self, by: f64) -> Calls {
        Calls {
            forward_s: self.forward_s * by,
            backward_s: self.backward_s * by,
            backward_input_s: self.backward_input_s * by,
            backward_weight_s: self.backward_weight_s * by,
        }
    }
}

/// α–β of a link or of a ring all-reduce (2(k−1)·α + 2(k−1)/k · n/β).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlphaBeta {
    pub alpha_s: f64,
    pub beta_bytes_per_s: f64,
}

/// The host the processes ran on: its cores (those the processes may run on), the threads
/// each process computed with, the seconds between its scheduler's balancings of the cores
/// (0 where not measured: an idle core takes a waiting process at once) and the time slice
/// after which it switches between two processes sharing a core at their next system call
/// (0 where not measured: the processes share the core evenly), both from
/// `mpipec.torch.scheduler`. Older profiles lack it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Host {
    pub cores: u64,
    pub threads: u64,
    pub balance_s: f64,
    pub slice_s: f64,
}

impl Host {
    /// How the scheduler shares the cores, as the summaries say it: how often it balances them
    /// and the slices it switches at, where measured.
    pub fn scheduling(&self) -> Option<String> {
        let every = (self.balance_s > 0.0).then(|| format!("balanced every {:.1} ms", self.balance_s * 1e3));
        let turns = (self.slice_s > 0.0).then(|| format!("in turns of {:.2} ms", self.slice_s * 1e3));
        let said: Vec<String> = every.into_iter().chain(turns).collect();
        (!said.is_empty()).then(|| said.join(", "))
    }
}

/// The host's speed as a fixed kernel measured it (`mpipec.torch.host_speed`): its name, which
/// changes with the kernel, and its median seconds. Two runs that timed the same kernel ran at
/// the ratio of their seconds; the kernel is none of a plan's, so the ratio says nothing of one.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpeed {
    pub kernel: String,
    pub seconds: f64,
}

impl HostSpeed {
    /// How much slower (above 1) the host ran for `then` than for `self`; None where they timed
    /// different kernels.
    pub fn ratio(&self, then: &HostSpeed) -> Option<f64> {
        (self.kernel == then.kernel).then(|| then.seconds / self.seconds)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelPart {
    pub name: String,
    pub arch: String,
    pub layers: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub date: String,
    /// `cpu`, `cuda` or `npu`, and what the device calls itself.
    pub device_type: String,
    pub device_name: String,
    pub host: Option<Host>,
    pub versions: BTreeMap<String, String>,
    /// `miniature`, `hf:FAMILY` or a model directory.
    pub model_source: String,
    pub parts: Vec<ModelPart>,
    pub micro_batch_size: u64,
    pub seq_len: u64,
    pub layers: BTreeMap<String, LayerProfile>,
    pub runtime: Option<Runtime>,
    pub p2p: Option<AlphaBeta>,
    /// By group (`pp`, `dp`).
    pub all_reduce: BTreeMap<String, AlphaBeta>,
    /// The host's speed over the profile's run, per rank: each compute instruction in the order
    /// it ran, as (its median seconds over the steps, its time then over that median). Empty in
    /// older profiles.
    pub speed_trace: Vec<Vec<(f64, f64)>>,
    /// On a CPU host, the host's speed kernel over the profile's run (older profiles lack it).
    pub host_speed: Option<HostSpeed>,
}

impl Profile {
    pub fn miniature(&self) -> bool {
        self.model_source == "miniature"
    }

    /// The host's speed over the profile's run, where it has any (older profiles do not).
    pub fn speed(&self) -> Option<&[Vec<(f64, f64)>]> {
        self.speed_trace.iter().any(|r| !r.is_empty()).then_some(self.speed_trace.as_slice())
    }

    /// The same profile with every layer's forward and backward, and what each compute op costs
    /// once an instruction, `by` times as long: its kernels on a host running at another speed
    /// (the optimizer step, the runtime's other costs and the links as they were).
    pub fn kernels_scaled(&self, by: f64) -> Profile {
        let layers = self
            .layers
            .iter()
            .map(|(kind, l)| {
                let scaled = LayerProfile {
                    forward_s: l.forward_s * by,
                    backward_input_s: l.backward_input_s * by,
                    backward_weight_s: l.backward_weight_s * by,
                    backward_s: l.backward_s.map(|b| b * by),
                    ..*l
                };
                (kind.clone(), scaled)
            })
            .collect();
        let runtime = self.runtime.map(|r| Runtime { call: r.call.scaled(by), ..r });
        Profile { layers, runtime, ..self.clone() }
    }
}

/// Where a profile file is wrong: the field (a dotted path) and what it must be.
#[derive(Clone, Debug, PartialEq)]
pub struct Malformed {
    pub field: String,
    pub problem: String,
}

/// The profile format this mpipec writes and reads.
pub const FORMAT: u64 = 1;

fn malformed(field: &str, problem: impl Into<String>) -> Malformed {
    Malformed { field: field.to_string(), problem: problem.into() }
}

fn at<'v>(v: &'v Value, path: &str, key: &str) -> Result<&'v Value, Malformed> {
    v.get(key).ok_or_else(|| malformed(&join(path, key), "is missing"))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn number(v: &Value, path: &str, key: &str) -> Result<f64, Malformed> {
    match at(v, path, key)?.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(malformed(&join(path, key), "must be a number of 0 or more")),
    }
}

fn positive(v: &Value, path: &str, key: &str) -> Result<f64, Malformed> {
    match number(v, path, key)? {
        x if x > 0.0 => Ok(x),
        _ => Err(malformed(&join(path, key), "must be a number above 0")),
    }
}

fn optional(v: &Value, path: &str, key: &str) -> Result<Option<f64>, Malformed> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => number(v, path, key).map(Some),
    }
}

fn text(v: &Value, path: &str, key: &str) -> Result<String, Malformed> {
    at(v, path, key)?.as_str().map(str::to_string).ok_or_else(|| malformed(&join(path, key), "must be a string"))
}

fn count(v: &Value, path: &str, key: &str) -> Result<u64, Malformed> {
    at(v, path, key)?.as_u64().ok_or_else(|| malformed(&join(path, key), "must be a whole number"))
}

fn object<'v>(v: &'v Value, path: &str, key: &str) -> Result<&'v serde_json::Map<String, Value>, Malformed> {
    at(v, path, key)?.as_object().ok_or_else(|| malformed(&join(path, key), "must be an object"))
}

fn layer(v: &Value, path: &str) -> Result<LayerProfile, Malformed> {
    Ok(LayerProfile {
        forward_s: number(v, path, "forward_s")?,
        backward_input_s: number(v, path, "backward_input_s")?,
        backward_weight_s: number(v, path, "backward_weight_s")?,
        backward_s: optional(v, path, "backward_s")?,
        optimizer_s: optional(v, path, "optimizer_s")?,
        output_bytes: number(v, path, "output_bytes")?,
        grad_bytes: number(v, path, "grad_bytes")?,
    })
}

fn alpha_beta(v: &Value, path: &str) -> Result<AlphaBeta, Malformed> {
    Ok(AlphaBeta { alpha_s: number(v, path, "alpha_s")?, beta_bytes_per_s: positive(v, path, "beta_bytes_per_s")? })
}

fn runtime(v: &Value) -> Result<Runtime, Malformed> {
    let path = "runtime";
    Ok(Runtime {
        instruction_s: number(v, path, "instruction_s")?,
        compute_s: number(v, path, "compute_s")?,
        send_s: number(v, path, "send_s")?,
        recv_s: number(v, path, "recv_s")?,
        message_cpu_s: optional(v, path, "message_cpu_s")?.unwrap_or(0.0),
        send_wait_s: optional(v, path, "send_wait_s")?.unwrap_or(0.0),
        call: v.get("call_s").filter(|c| !c.is_null()).map(calls).transpose()?.unwrap_or_default(),
    })
}

/// `runtime.call_s`: seconds per compute op, each 0 or more.
fn calls(v: &Value) -> Result<Calls, Malformed> {
    let path = "runtime.call_s";
    if !v.is_object() {
        return Err(malformed(path, "must be an object"));
    }
    Ok(Calls {
        forward_s: number(v, path, "forward_s")?,
        backward_s: number(v, path, "backward_s")?,
        backward_input_s: number(v, path, "backward_input_s")?,
        backward_weight_s: number(v, path, "backward_weight_s")?,
    })
}

/// `device.cores` and `device.threads`, both or neither (a profile from before they were kept),
/// and `device.balance_s` and `device.slice_s` where the profile measured them.
fn host(device: &Value) -> Result<Option<Host>, Malformed> {
    let whole = |key: &str| match device.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(malformed(&join("device", key), "must be a whole number above 0")),
        },
    };
    match (whole("cores")?, whole("threads")?) {
        (Some(cores), Some(threads)) => Ok(Some(Host {
            cores,
            threads,
            balance_s: optional(device, "device", "balance_s")?.unwrap_or(0.0),
            slice_s: optional(device, "device", "slice_s")?.unwrap_or(0.0),
        })),
        (None, None) => Ok(None),
        (None, Some(_)) => Err(malformed("device.cores", "is missing (`device.threads` is there)")),
        (Some(_), None) => Err(malformed("device.threads", "is missing (`device.cores` is there)")),
    }
}

fn parts(v: &Value) -> Result<Vec<ModelPart>, Malformed> {
    let list = at(v, "model", "parts")?.as_array().ok_or_else(|| malformed("model.parts", "must be a list"))?;
    list.iter()
        .enumerate()
        .map(|(i, p)| {
            let path = format!("model.parts[{i}]");
            Ok(ModelPart {
                name: text(p, &path, "name")?,
                arch: text(p, &path, "arch")?,
                layers: count(p, &path, "layers")?,
            })
        })
        .collect()
}

/// `speed_trace`: per rank, [seconds, ratio] pairs, the seconds 0 or more and the ratio above 0.
fn speed_trace(v: &Value) -> Result<Vec<Vec<(f64, f64)>>, Malformed> {
    fn list<'v>(x: &'v Value, path: &str) -> Result<&'v Vec<Value>, Malformed> {
        x.as_array().ok_or_else(|| malformed(path, "must be a list"))
    }
    list(v, "speed_trace")?
        .iter()
        .enumerate()
        .map(|(r, rank)| {
            let path = format!("speed_trace[{r}]");
            list(rank, &path)?
                .iter()
                .enumerate()
                .map(|(k, pair)| {
                    let numbers: Option<Vec<f64>> = pair.as_array().and_then(|p| p.iter().map(Value::as_f64).collect());
                    match numbers.as_deref() {
                        Some(&[s, x]) if s.is_finite() && s >= 0.0 && x.is_finite() && x > 0.0 => Ok((s, x)),
                        _ => Err(malformed(&format!("{path}[{k}]"), "must be [seconds of 0 or more, a ratio above 0]")),
                    }
                })
                .collect()
        })
        .collect()
}

/// `host_speed`: the kernel's name and its seconds, above 0.
fn host_speed(v: &Value) -> Result<HostSpeed, Malformed> {
    let path = "host_speed";
    if !v.is_object() {
        return Err(malformed(path, "must be an object"));
    }
    Ok(HostSpeed { kernel: text(v, path, "kernel")?, seconds: positive(v, path, "seconds")? })
}

/// Parses a profile file's text; `Err` names the field that is wrong (or says where the JSON
/// stops making sense, for a truncated file).
pub fn parse(text_of_file: &str) -> Result<Profile, Malformed> {
    let v: Value = serde_json::from_str(text_of_file).map_err(|e| {
        let what = if e.is_eof() { "ends early (a truncated file)" } else { "is not JSON" };
        malformed("", format!("{what}: {e}"))
    })?;
    if !v.is_object() {
        return Err(malformed("", "must be a JSON object"));
    }
    match count(&v, "", "format")? {
        FORMAT => {}
        other => return Err(malformed("format", format!("is {other}; this mpipec reads format {FORMAT}"))),
    }
    let device = at(&v, "", "device")?;
    let model = at(&v, "", "model")?;
    let shapes = at(&v, "", "shapes")?;
    let versions = object(&v, "", "versions")?
        .iter()
        .map(|(k, x)| {
            Ok((k.clone(), x.as_str().ok_or_else(|| malformed(&join("versions", k), "must be a string"))?.into()))
        })
        .collect::<Result<_, Malformed>>()?;
    let layers = object(&v, "", "layers")?
        .iter()
        .map(|(k, x)| Ok((k.clone(), layer(x, &join("layers", k))?)))
        .collect::<Result<_, Malformed>>()?;
    let all_reduce = match v.get("all_reduce") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(_) => object(&v, "", "all_reduce")?
            .iter()
            .map(|(k, x)| Ok((k.clone(), alpha_beta(x, &join("all_reduce", k))?)))
            .collect::<Result<_, Malformed>>()?,
    };
    Ok(Profile {
        date: text(&v, "", "date")?,
        device_type: text(device, "device", "type")?,
        device_name: text(device, "device", "name")?,
        host: host(device)?,
        versions,
        model_source: text(model, "model", "source")?,
        parts: parts(model)?,
        micro_batch_size: count(shapes, "shapes", "micro_batch_size")?,
        seq_len: count(shapes, "shapes", "seq_len")?,
        layers,
        runtime: v.get("runtime").filter(|r| !r.is_null()).map(runtime).transpose()?,
        p2p: v.get("p2p").filter(|r| !r.is_null()).map(|p| alpha_beta(p, "p2p")).transpose()?,
        all_reduce,
        speed_trace: v.get("speed_trace").filter(|t| !t.is_null()).map(speed_trace).transpose()?.unwrap_or_default(),
        host_speed: v.get("host_speed").filter(|h| !h.is_null()).map(host_speed).transpose()?,
    })
}

/// A part of the model as layer kinds see it: its architecture's name, whether it is an
/// encoder, and its layer count.
pub struct PartShape<'a> {
    pub arch: &'a str,
    pub encoder: bool,
    pub layers: u64,
}

/// The kind of every global layer of a model of `parts`, as a profile of the miniature
/// (`miniature`) or of the model itself names it.
pub fn kinds<'a>(parts: impl IntoIterator<Item = PartShape<'a>>, miniature: bool) -> Vec<String> {
    let mut out = Vec::new();
    for part in parts {
        let n = part.layers;
        let base = match (miniature, part.encoder) {
            (true, true) => "encoder",
            (true, false) => "decoder",
            (false, _) => part.arch,
        };
        for i in 0..n {
            out.push(match (i == 0, i + 1 == n) {
                (true, true) => format!("{base}:only"),
                (true, false) => format!("{base}:first"),
                (false, true) => format!("{base}:last"),
                (false, false) => base.to_string(),
            });
        }
    }
    out
}
