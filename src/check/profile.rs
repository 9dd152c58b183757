//! The cluster's `profile`: the file parsed into measured costs, and what it does not cover of
//! the plan (another device, model or shape: W0005; layer kinds it lacks: W0006).

use std::sync::Arc;

use super::Ctx;
use super::fields::Fields;
use crate::ast;
use crate::error::{Error, FieldError, Warning};
use crate::plan::Plan;
use crate::profile::Profile;

impl Ctx<'_> {
    /// The profile the cluster names, parsed; `Err` after E0211 when the file is not one.
    pub(super) fn profile(&mut self, f: &Fields) -> Result<Option<Arc<Profile>>, ()> {
        let (Some((file, text)), Some(span)) = (f.file("profile"), f.span("profile")) else { return Ok(None) };
        crate::profile::parse(text).map(|p| Some(Arc::new(p))).map_err(|m| {
            let e = FieldError::MalformedProfile { span, file: file.into(), field: m.field, problem: m.problem };
            self.error(Error::Field(e));
        })
    }

    /// W0005 and W0006 for the profile of a checked plan.
    pub(super) fn profile_warnings(&mut self, plan: &Plan, cluster: &ast::Section) {
        let Some(p) = &plan.cluster.profile else { return };
        let Some(entry) = cluster.body.entries.iter().find(|e| e.key().name == "profile") else { return };
        let (span, file) = (entry.span(), profile_name(entry));
        let differences = differences(p, plan);
        if !differences.is_empty() {
            self.error(Error::Warning(Warning::ProfileMismatch { span, file: file.clone(), differences }));
        }
        let kinds = missing_kinds(p, plan);
        if !kinds.is_empty() {
            self.error(Error::Warning(Warning::ProfileMissing { span, file, kinds }));
        }
    }
}

/// The file as the plan names it.
fn profile_name(entry: &ast::Entry) -> String {
    match entry {
        ast::Entry::Field(f) => match &f.value.kind {
            ast::ValueKind::String(s) => s.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// The layer kinds `plan` uses that `profile` lacks, in the plan's order.
fn missing_kinds(profile: &Profile, plan: &Plan) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for kind in plan.model.layer_kinds(profile.miniature()) {
        if !profile.layers.contains_key(&kind) && !missing.contains(&kind) {
            missing.push(kind);
        }
    }
    missing
}

/// What makes `profile` describe another device or model than `plan`'s, one line each.
fn differences(profile: &Profile, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    let hardware = &plan.cluster.hardware.name;
    let family = hardware.split('_').next().unwrap_or(hardware).to_ascii_lowercase();
    let device: String = profile.device_name.to_ascii_lowercase().chars().filter(char::is_ascii_alphanumeric).collect();
    if !device.contains(&family) {
        out.push(format!(
            "it was taken on `{}` ({}), the plan's hardware is `{hardware}`",
            profile.device_name, profile.device_type
        ));
    }
    if profile.miniature() {
        out.push("it measured the miniature (`mpipec verify`'s model), not the plan's model".into());
        return out;
    }
    if let Some(family) = profile.model_source.strip_prefix("hf:") {
        out.push(format!("it measured transformers' tiny random `hf:{family}`, not the plan's model"));
    }
    let describe = |parts: &mut dyn Iterator<Item = (&str, u64)>| {
        parts.map(|(arch, n)| format!("{arch} ({n} layers)")).collect::<Vec<_>>().join(", ")
    };
    let theirs = describe(&mut profile.parts.iter().map(|p| (p.arch.as_str(), p.layers)));
    let ours = describe(&mut plan.model.parts.iter().map(|p| (p.arch.name.as_str(), p.arch.layers())));
    if theirs != ours {
        out.push(format!("its model is {theirs} ({}), the plan's is {ours}", profile.model_source));
    }
    let (b, s) = (plan.batch.micro_batch_size, plan.batch.seq_len);
    if (profile.micro_batch_size, profile.seq_len) != (b, s) {
        out.push(format!(
            "it measured micro_batch_size {} and seq_len {}, the plan has {b} and {s}",
            profile.micro_batch_size, profile.seq_len
        ));
    }
    out
}
