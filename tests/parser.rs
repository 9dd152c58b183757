//! Parser unit tests for the syntax that is easy to get wrong.

use mpipe::ast::*;
use mpipe::parse::parse;
use mpipe::span::FileId;

fn module(text: &str) -> Module {
    parse(FileId(0), text).unwrap_or_else(|e| panic!("{text:?} should parse: {:?}", e.to_diagnostic().message))
}

fn fails(text: &str) {
    assert!(parse(FileId(0), text).is_err(), "{text:?} should not parse");
}

#[test]
fn the_statement_form_parses_as_written() {
    let m = module("cut enc | llm;\nschedule transpose, 1f1b;\nowner by_microbatch;\n");
    let Item::Cut(cut) = &m.items[0] else { panic!() };
    assert_eq!(cut.regions.len(), 2);
    let Item::Schedule(s) = &m.items[1] else { panic!() };
    assert_eq!(s.skeletons.iter().map(|k| k.name.name.as_str()).collect::<Vec<_>>(), ["transpose", "1f1b"]);
    let Item::Owner(o) = &m.items[2] else { panic!() };
    assert!(matches!(&o.spec.kind, ValueKind::Name(n) if n.name == "by_microbatch"));
}

#[test]
fn skeleton_arguments_positional_and_named() {
    let m = module("schedule interleaved(2), 1f1b(split = [6, 6, 6, 6,]), transpose(prefix), gpipe();");
    let Item::Schedule(s) = &m.items[0] else { panic!() };
    assert_eq!(s.skeletons[0].args.as_ref().unwrap()[0].name, None);
    assert_eq!(s.skeletons[1].args.as_ref().unwrap()[0].name.as_ref().unwrap().name, "split");
    assert!(matches!(&s.skeletons[2].args.as_ref().unwrap()[0].value.kind, ValueKind::Name(n) if n.name == "prefix"));
    assert_eq!(s.skeletons[3].args, Some(vec![]));
}

#[test]
fn numbers_and_units() {
    let m = module("hardware h { a = 1.6TB/s; b = 151_936; c = 1e15; d = 64GiB; e = 10us; f = 2.5e-3s; }");
    let Item::Definition(d) = &m.items[0] else { panic!() };
    let quantities: Vec<(f64, Option<String>)> = d
        .body
        .entries
        .iter()
        .map(|e| match e {
            Entry::Field(Field { value: Value { kind: ValueKind::Number(q), .. }, .. }) => {
                (q.value, q.unit.as_ref().map(|u| u.name.clone()))
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(quantities[0], (1.6, Some("TB/s".into())));
    assert_eq!(quantities[1], (151936.0, None));
    assert_eq!(quantities[2], (1e15, None));
    assert_eq!(quantities[3], (64.0, Some("GiB".into())));
    assert_eq!(quantities[5], (2.5e-3, Some("s".into())));
    // A unit belongs to its number: a space between them is a syntax error, not a guess.
    fails("hardware h { hbm = 64 GiB; }");
}

#[test]
fn keywords_are_field_names_but_not_names() {
    module("cluster { hardware = h100; }");
    fails("hardware cut { }");
    fails("cut cut;");
    fails("model m { llm = true; } cut true;");
}

#[test]
fn instance_blocks_need_no_semicolon_other_fields_do() {
    module("model m { enc = vit { frozen = true; } llm = lm; }");
    module("model m { enc = vit { frozen = true; }; llm = lm; }");
    fails("model m { llm = lm }");
}

#[test]
fn imports() {
    let m = module(
        "use std::hardware::h100_sxm;\nuse std::models::{a, b,};\nuse \"lib/parts.mpipe\"::{vit};\nuse \"x.mpipe\"::y;",
    );
    let Item::Use(u) = &m.items[0] else { panic!() };
    assert!(matches!(&u.source, UseSource::Path(p) if p.len() == 2));
    assert_eq!(u.items[0].name, "h100_sxm");
    let Item::Use(u) = &m.items[1] else { panic!() };
    assert!(u.grouped && u.items.len() == 2);
    let Item::Use(u) = &m.items[2] else { panic!() };
    assert!(matches!(&u.source, UseSource::File(s) if s.value == "lib/parts.mpipe"));
    fails("use std;");
    fails("use std::models::{a b};");
}

#[test]
fn comments_strings_and_ranges() {
    let m = module("/* a */ cut /* b */ enc[0..4] + enc[4..8] // c\n | llm; target mindspeed-mm, megatron(nearest);\n");
    let Item::Cut(cut) = &m.items[0] else { panic!() };
    assert_eq!(cut.regions[0].segments.len(), 2);
    assert_eq!(cut.regions[0].segments[1].range.as_ref().map(|r| (r.start, r.end)), Some((4, 8)));
    let Item::Target(t) = &m.items[1] else { panic!() };
    assert_eq!(t.targets[0].name.name, "mindspeed-mm");
    assert!(t.targets[0].option.is_none());
    assert_eq!(t.targets[1].option.as_ref().map(|o| o.name.as_str()), Some("nearest"));
    fails("target megatron();");
    fails("target megatron(nearest, x);");
    module("batch { note = \"a \\\"quoted\\\" // not a comment\"; }");
    fails("batch { note = \"unterminated; }");
    fails("/* unterminated");
    module("");
    module("// only a comment");
}

#[test]
fn spans_point_at_the_source() {
    let text = "cut enc | llm;";
    let m = module(text);
    let Item::Cut(cut) = &m.items[0] else { panic!() };
    let llm = &cut.regions[1].segments[0].part;
    assert_eq!(&text[llm.span.range()], "llm");
}

#[test]
fn a_byte_order_mark_is_skipped_and_spans_still_point_at_the_source() {
    let text = "\u{FEFF}cut enc | llm;";
    let m = module(text);
    let Item::Cut(cut) = &m.items[0] else { panic!() };
    assert_eq!(&text[cut.regions[1].segments[0].part.span.range()], "llm");
    fails("cut \u{FEFF}enc;");
}
