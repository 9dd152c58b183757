//! The `schedule`, `owner` and `target` statements: each region's skeleton with its
//! arguments, the encoder's owner map, and the backends the plan asks for.

use super::{Ctx, TRANSPOSE_ONLY, TransposeSpans};
use crate::algebra::skeleton::{self, Kind, Param, ParamKind, SkeletonDef};
use crate::algebra::{Chunks, Fill, OwnerSpec, Skeleton};
use crate::ast::{self, ValueKind};
use crate::error::{ClusterError, Error, FieldError, ScheduleError};
use crate::plan::{RegionSchedule, Target, TargetSpec};
use crate::span::Span;
use crate::suggest::did_you_mean;

impl Ctx<'_> {
    pub(super) fn schedule(&mut self, stmt: &ast::ScheduleStmt) -> Option<Vec<RegionSchedule>> {
        let mut out = Vec::new();
        let mut ok = true;
        for expr in &stmt.skeletons {
            match self.skeleton(expr) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn skeleton(&mut self, expr: &ast::SkeletonExpr) -> Option<RegionSchedule> {
        let name = &expr.name.name;
        let Some(def) = skeleton::lookup(name) else {
            let suggestion = did_you_mean(name, skeleton::names());
            self.error(Error::Schedule(ScheduleError::UnknownSkeleton {
                span: expr.name.span,
                name: name.clone(),
                suggestion,
            }));
            return None;
        };
        // Every parameter is checked even when an argument could not be placed, so a missing
        // one is reported beside a misspelt one.
        let (values, bound) = self.bind(def, expr);
        let args = self.arguments(def, expr.span, values).filter(|_| bound)?;
        self.split_spans.push(args.split.as_ref().map(|(_, s)| *s));
        self.transpose_spans.push(TransposeSpans { chunks: args.chunks.1, lookahead: args.lookahead.1 });
        Some(RegionSchedule { skeleton: construct(def, &args), split: args.split.map(|(l, _)| l), span: expr.span })
    }

    fn bad_argument(&mut self, def: &SkeletonDef, span: Span, message: String, help: String) {
        self.error(Error::Schedule(ScheduleError::BadSkeletonArgument {
            span,
            skeleton: def.name.into(),
            message,
            help,
        }));
    }

    /// Each argument at its parameter's index, and whether every argument found its place.
    fn bind<'e>(&mut self, def: &SkeletonDef, expr: &'e ast::SkeletonExpr) -> (Bound<'e>, bool) {
        let mut values: Bound = vec![None; def.params.len()];
        let mut ok = true;
        for (position, arg) in expr.args.iter().flatten().enumerate() {
            let Some(index) = self.parameter_of(def, position, arg) else {
                ok = false;
                continue;
            };
            if values[index].is_some() {
                let message = format!("`{}` given twice", def.params[index].name);
                self.bad_argument(def, arg.span, message, "give each parameter once".into());
                ok = false;
                continue;
            }
            values[index] = Some((&arg.value, arg.span));
        }
        (values, ok)
    }

    /// The index of the parameter an argument gives, by its name or its position.
    fn parameter_of(&mut self, def: &SkeletonDef, position: usize, arg: &ast::Arg) -> Option<usize> {
        let Some(n) = &arg.name else {
            if position < def.params.len() {
                return Some(position);
            }
            let help =
                format!("`{}` takes at most {}", def.name, crate::error::count(def.params.len() as u64, "argument"));
            self.bad_argument(def, arg.span, "too many arguments".into(), help);
            return None;
        };
        if let Some(i) = def.params.iter().position(|p| p.name == n.name) {
            return Some(i);
        }
        if TRANSPOSE_ONLY.contains(&n.name.as_str()) {
            self.error(Error::Schedule(ScheduleError::TransposeOnlyArgument {
                span: arg.span,
                name: n.name.clone(),
                skeleton: def.name.into(),
            }));
            return None;
        }
        let names: Vec<&str> = def.params.iter().map(|p| p.name).collect();
        let help = match did_you_mean(&n.name, names.iter().copied()) {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!("`{}` takes: {}", def.name, names.join(", ")),
        };
        self.bad_argument(def, n.span, format!("no parameter `{}`", n.name), help);
        None
    }

    /// Every parameter's value, given or defaulted; `None` when any is wrong or missing.
    fn arguments(&mut self, def: &SkeletonDef, span: Span, values: Bound) -> Option<Arguments> {
        let mut args = Arguments {
            counts: Vec::new(),
            split: None,
            fill: Fill::Slack,
            chunks: (Chunks::Auto, None),
            lookahead: (false, None),
        };
        let mut ok = true;
        for (param, given) in def.params.iter().zip(values) {
            ok &= match given {
                Some((value, at)) => self.argument(def, param, value, at, &mut args),
                None => self.default_argument(def, param, span, &mut args),
            }
            .is_some();
        }
        ok.then_some(args)
    }

    fn default_argument(&mut self, def: &SkeletonDef, param: &Param, span: Span, args: &mut Arguments) -> Option<()> {
        match param.kind {
            ParamKind::Count { default: Some(d), .. } => args.counts.push(d),
            ParamKind::Count { default: None, .. } => {
                let help = format!("write `{}({})`: {}", def.name, 2, param.doc);
                self.bad_argument(def, span, format!("missing `{}`", param.name), help);
                return None;
            }
            ParamKind::Choice { .. } | ParamKind::CountOrAuto | ParamKind::Lookahead | ParamKind::Split => {}
        }
        Some(())
    }

    fn argument(
        &mut self,
        def: &SkeletonDef,
        param: &Param,
        value: &ast::Value,
        span: Span,
        args: &mut Arguments,
    ) -> Option<()> {
        match &param.kind {
            ParamKind::Count { min, .. } => args.counts.push(self.count_argument(def, param, *min, value, span)?),
            ParamKind::Choice { choices, .. } => args.fill = self.fill_argument(def, param, choices, value, span)?,
            ParamKind::CountOrAuto => args.chunks = (self.chunks_argument(value, span)?, Some(span)),
            ParamKind::Lookahead => args.lookahead = (self.lookahead_argument(value, span)?, Some(span)),
            ParamKind::Split => args.split = Some((self.split_argument(def, value, span)?, span)),
        }
        Some(())
    }

    fn count_argument(
        &mut self,
        def: &SkeletonDef,
        param: &Param,
        min: u64,
        value: &ast::Value,
        span: Span,
    ) -> Option<u64> {
        match &value.kind {
            ValueKind::Number(q)
                if q.unit.is_none() && q.value.fract() == 0.0 && q.value >= min as f64 && q.value <= 1024.0 =>
            {
                Some(q.value as u64)
            }
            _ => {
                let message = format!("`{}` must be a whole number from {min} to 1024", param.name);
                self.bad_argument(def, span, message, format!("{}: {}", param.name, param.doc));
                None
            }
        }
    }

    fn fill_argument(
        &mut self,
        def: &SkeletonDef,
        param: &Param,
        choices: &[&str],
        value: &ast::Value,
        span: Span,
    ) -> Option<Fill> {
        match &value.kind {
            ValueKind::Name(n) if choices.contains(&n.name.as_str()) => {
                Some(if n.name == "prefix" { Fill::Prefix } else { Fill::Slack })
            }
            _ => {
                let message = format!("`{}` must be one of {}", param.name, choices.join(", "));
                self.bad_argument(def, span, message, param.doc.into());
                None
            }
        }
    }

    fn chunks_argument(&mut self, value: &ast::Value, span: Span) -> Option<Chunks> {
        match &value.kind {
            ValueKind::Name(n) if n.name == "auto" => Some(Chunks::Auto),
            ValueKind::Number(q) if q.unit.is_none() && q.value.fract() == 0.0 && q.value >= 1.0 => {
                Some(Chunks::Fixed(q.value.min(f64::from(u32::MAX)) as u32))
            }
            _ => {
                self.error(Error::Schedule(ScheduleError::ChunksOutOfRange { span, layers: None }));
                None
            }
        }
    }

    fn lookahead_argument(&mut self, value: &ast::Value, span: Span) -> Option<bool> {
        match &value.kind {
            ValueKind::Number(q) if q.unit.is_none() && (q.value == 0.0 || q.value == 1.0) => Some(q.value == 1.0),
            _ => {
                self.error(Error::Schedule(ScheduleError::LookaheadOutOfRange { span }));
                None
            }
        }
    }

    /// A `split = [...]`'s layer counts, every bad item reported.
    fn split_argument(&mut self, def: &SkeletonDef, value: &ast::Value, span: Span) -> Option<Vec<u64>> {
        let help = || "write the layers of each stage: `split = [6, 6, 6, 6]`".to_string();
        let ValueKind::List(items) = &value.kind else {
            self.bad_argument(def, span, "`split` must be a non-empty list".into(), help());
            return None;
        };
        if items.is_empty() {
            self.bad_argument(def, span, "`split` must be a non-empty list".into(), help());
            return None;
        }
        let mut layers = Some(Vec::new());
        for item in items {
            let n = match &item.kind {
                ValueKind::Number(q) => self.count(item.span, q, 1),
                _ => {
                    self.bad_argument(def, item.span, "expected a layer count".into(), help());
                    None
                }
            };
            layers = layers.zip(n).map(|(mut l, n)| {
                l.push(n);
                l
            });
        }
        layers
    }

    pub(super) fn owner(&mut self, stmt: &ast::OwnerStmt) -> Option<OwnerSpec> {
        match &stmt.spec.kind {
            ValueKind::Name(n) => match n.name.as_str() {
                "by_microbatch" => Some(OwnerSpec::ByMicrobatch),
                "round_robin" => Some(OwnerSpec::RoundRobin),
                other => {
                    let choices = crate::algebra::owner::STRATEGIES;
                    let suggestion = did_you_mean(other, choices.iter().copied());
                    self.error(Error::Field(FieldError::InvalidChoice {
                        span: n.span,
                        what: "owner map".into(),
                        found: other.into(),
                        choices: choices.to_vec(),
                        suggestion,
                    }));
                    None
                }
            },
            ValueKind::List(items) => {
                let mut ranks = Vec::new();
                for item in items {
                    match &item.kind {
                        ValueKind::Number(q) => ranks.push(self.count(item.span, q, 0)?),
                        _ => {
                            self.error(Error::Field(FieldError::WrongType {
                                span: item.span,
                                expected: "a rank number".into(),
                                found: super::fields::describe(item),
                                defined_at: None,
                            }));
                            return None;
                        }
                    }
                }
                Some(OwnerSpec::Explicit(ranks))
            }
            _ => unreachable!("grammar: owner is a name or a list"),
        }
    }

    pub(super) fn targets(&mut self, stmt: &ast::TargetStmt) -> Vec<TargetSpec> {
        let mut out: Vec<TargetSpec> = Vec::new();
        for t in &stmt.targets {
            let name = &t.name.name;
            let Some(target) = Target::parse(name) else {
                let suggestion = did_you_mean(name, Target::NAMES.iter().copied());
                self.error(Error::Cluster(ClusterError::UnknownTarget {
                    span: t.name.span,
                    name: name.clone(),
                    suggestion,
                    targets: Target::NAMES,
                }));
                continue;
            };
            let nearest = match &t.option {
                None => false,
                Some(o) if o.name == "nearest" => true,
                Some(o) => {
                    self.error(Error::Field(FieldError::InvalidChoice {
                        span: o.span,
                        what: "target option".into(),
                        found: o.name.clone(),
                        choices: vec!["nearest"],
                        suggestion: did_you_mean(&o.name, ["nearest"]),
                    }));
                    continue;
                }
            };
            match out.iter_mut().find(|o| o.target == target) {
                Some(seen) => seen.nearest |= nearest,
                None => out.push(TargetSpec { target, nearest, span: Some(t.span) }),
            }
        }
        out
    }
}

/// Each of a skeleton's parameters: the argument given for it and where, if any.
type Bound<'a> = Vec<Option<(&'a ast::Value, Span)>>;

/// A skeleton's checked arguments: what its constructor reads, and where `split`, `chunks`
/// and `lookahead` were written, for the rules that need the cut.
struct Arguments {
    counts: Vec<u64>,
    split: Option<(Vec<u64>, Span)>,
    fill: Fill,
    chunks: (Chunks, Option<Span>),
    lookahead: (bool, Option<Span>),
}

fn construct(def: &SkeletonDef, args: &Arguments) -> Skeleton {
    let v = args.counts.first().copied().unwrap_or(1) as u32;
    match def.kind {
        Kind::Gpipe => Skeleton::Gpipe,
        Kind::OneFOneB => Skeleton::OneFOneB,
        Kind::Interleaved => Skeleton::Interleaved { v },
        Kind::Zb1p => Skeleton::Zb1p { v },
        Kind::Zbv => Skeleton::Zbv,
        Kind::DualPipeV => Skeleton::DualPipeV,
        Kind::Transpose => Skeleton::Transpose { fill: args.fill, chunks: args.chunks.0, lookahead: args.lookahead.0 },
    }
}
