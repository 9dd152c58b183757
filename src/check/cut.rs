//! The `cut`: the model's parts and layer ranges resolved to regions of global layers, with
//! every gap and overlap reported and, for a cut that stops early, the fix that completes it.

use std::ops::Range;

use super::Ctx;
use crate::algebra::{Cut, Region};
use crate::ast;
use crate::error::{CutError, Error};
use crate::plan::Model;
use crate::span::Span;
use crate::suggest::did_you_mean;

/// One segment of a cut, resolved: the part, its layers within the part and in the model.
struct Piece {
    part: usize,
    local: Range<u64>,
    global: Range<u64>,
    span: Span,
}

impl Ctx<'_> {
    /// Regions over the global layer numbering; order, overlap and coverage are checked here.
    pub(super) fn cut(&mut self, stmt: &ast::CutStmt, def: &ast::Definition, model: &Model) -> Option<Cut> {
        let mut offsets = Vec::with_capacity(model.parts.len());
        let mut total = 0;
        for p in &model.parts {
            offsets.push(total);
            total += p.arch.layers();
        }
        // First resolve every segment to global layers, reporting unknown parts and ranges.
        let mut resolved: Vec<Vec<Piece>> = Vec::new();
        let mut ok = true;
        for region in &stmt.regions {
            let mut segments = Vec::new();
            for seg in &region.segments {
                let Some(index) = model.parts.iter().position(|p| p.name == seg.part.name) else {
                    let suggestion = did_you_mean(&seg.part.name, model.parts.iter().map(|p| p.name.as_str()));
                    let (span, name, model) = (seg.part.span, seg.part.name.clone(), def.name.span);
                    self.error(Error::Cut(CutError::UnknownPart { span, name, model, suggestion }));
                    ok = false;
                    continue;
                };
                let layers = model.parts[index].arch.layers();
                let range = match &seg.range {
                    None => 0..layers,
                    Some(r) if r.start >= r.end || r.end > layers => {
                        let detail = if r.start >= r.end {
                            format!("{}..{} is empty", r.start, r.end)
                        } else {
                            format!("ends at {}, past the last layer", r.end)
                        };
                        self.error(Error::Cut(CutError::BadLayerRange {
                            span: r.span,
                            part: seg.part.name.clone(),
                            layers,
                            detail,
                        }));
                        ok = false;
                        continue;
                    }
                    Some(r) => r.start..r.end,
                };
                let global = offsets[index] + range.start..offsets[index] + range.end;
                segments.push(Piece { part: index, local: range, global, span: seg.span });
            }
            resolved.push(segments);
        }
        if !ok {
            return None;
        }
        // Then order and overlap, then coverage: a cut in the wrong order also leaves gaps,
        // and the order is the mistake to name.
        let flat: Vec<&Piece> = resolved.iter().flatten().collect();
        for pair in flat.windows(2) {
            let (Piece { part: pa, global: a, span: a_span, .. }, Piece { part: pb, global: b, span: b_span, .. }) =
                (pair[0], pair[1]);
            if b.start < a.end {
                let detail = if pb < pa {
                    format!("`{}` comes before `{}` in the model", model.parts[*pb].name, model.parts[*pa].name)
                } else {
                    "overlaps the layers before it".to_string()
                };
                self.error(Error::Cut(CutError::CutOutOfOrder { span: *b_span, previous: *a_span, detail }));
                return None;
            }
        }
        let mut next = 0;
        for Piece { global, span, .. } in &flat {
            if global.start > next {
                let missing = describe_layers(model, &offsets, next..global.start);
                self.error(Error::Cut(CutError::CutIncomplete { span: *span, missing, fix: None }));
                ok = false;
            }
            next = global.end;
        }
        if ok && next < total {
            let missing = describe_layers(model, &offsets, next..total);
            let fix = full_cut(self, stmt, model, &offsets, next).map(|text| (stmt.span, text));
            let span = stmt.regions.last().map(|r| r.span).unwrap_or(stmt.span);
            self.error(Error::Cut(CutError::CutIncomplete { span, missing, fix }));
            ok = false;
        }
        let regions = stmt
            .regions
            .iter()
            .zip(resolved)
            .map(|(region, segments)| Region {
                name: source_text(self, region.span),
                layers: segments.first().map_or(0, |s| s.global.start)..segments.last().map_or(0, |s| s.global.end),
                segments: segments.into_iter().map(|p| (p.part, p.local)).collect(),
            })
            .collect();
        ok.then_some(Cut { regions })
    }
}

fn source_text(ctx: &Ctx, span: Span) -> String {
    ctx.program.sources.text(span).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "layers 32..36 of `llm`", for a gap in the cut.
fn describe_layers(model: &Model, offsets: &[u64], gap: std::ops::Range<u64>) -> String {
    let mut pieces = Vec::new();
    for (i, p) in model.parts.iter().enumerate() {
        let (s, e) = (offsets[i], offsets[i] + p.arch.layers());
        let (a, b) = (gap.start.max(s), gap.end.min(e));
        if a < b {
            if a == s && b == e {
                pieces.push(format!("`{}`", p.name));
            } else {
                pieces.push(format!("layers {}..{} of `{}`", a - s, b - s, p.name));
            }
        }
    }
    pieces.join(", ")
}

/// The cut written with its last region extended to the end of the model, when the gap is
/// only at the end: the mechanical fix for a cut that stops early.
fn full_cut(ctx: &Ctx, stmt: &ast::CutStmt, model: &Model, offsets: &[u64], covered: u64) -> Option<String> {
    let last = stmt.regions.last()?;
    let mut text = source_text(ctx, last.span);
    for (i, p) in model.parts.iter().enumerate() {
        let (s, e) = (offsets[i], offsets[i] + p.arch.layers());
        if e <= covered {
            continue;
        }
        if s < covered {
            // The last segment ends inside this part: widen its range to the part's end.
            let seg = last.segments.last()?;
            let range = seg.range.as_ref()?;
            let old = format!("{}[{}..{}]", seg.part.name, range.start, range.end);
            if !text.ends_with(&old) {
                return None;
            }
            text.truncate(text.len() - old.len());
            text.push_str(&if range.start == 0 {
                p.name.clone()
            } else {
                format!("{}[{}..{}]", p.name, range.start, p.arch.layers())
            });
        } else {
            text.push_str(&format!(" + {}", p.name));
        }
    }
    let mut regions: Vec<String> =
        stmt.regions[..stmt.regions.len() - 1].iter().map(|r| source_text(ctx, r.span)).collect();
    regions.push(text);
    Some(format!("cut {};", regions.join(" | ")))
}
