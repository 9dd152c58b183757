//! `mpipec fmt`: idempotent, comment-preserving, meaning-preserving, and every shipped file
//! is already in canonical form.

mod common;

use std::path::PathBuf;

/// The AST's debug form with every span removed: equal for two texts that mean the same.
fn shape(text: &str) -> String {
    let module = mpipe::parse::parse(mpipe::span::FileId(0), text).expect("parses");
    let debug = format!("{module:?}");
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug.as_str();
    while let Some(i) = rest.find("span: Span {") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find('}').unwrap();
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    out
}

fn comments(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.find("//").map(|i| l[i..].trim_end().to_string())).collect()
}

fn parseable_files() -> Vec<PathBuf> {
    let root = common::root();
    let mut files = common::files_under(&root.join("examples"), "mpipe");
    files.extend(common::files_under(&root.join("stdlib"), "mpipe"));
    files.extend(common::files_under(&root.join("tests/ui"), "mpipe"));
    files
        .into_iter()
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| mpipe::parse::parse(mpipe::span::FileId(0), &t).is_ok()))
        .collect()
}

#[test]
fn round_trips_every_file_that_parses() {
    let files = parseable_files();
    assert!(files.len() > 40, "fixtures and examples are found");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let once = mpipe::fmt::format(&text).unwrap();
        let twice = mpipe::fmt::format(&once).unwrap();
        assert_eq!(once, twice, "fmt is not idempotent on {}", path.display());
        assert_eq!(shape(&text), shape(&once), "fmt changed the meaning of {}", path.display());
        assert_eq!(comments(&text).len(), comments(&once).len(), "fmt lost a comment of {}", path.display());
    }
}

#[test]
fn shipped_files_are_canonical() {
    let root = common::root();
    let mut files = common::files_under(&root.join("examples"), "mpipe");
    files.extend(common::files_under(&root.join("stdlib"), "mpipe"));
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(mpipe::fmt::format(&text).unwrap(), text, "{} is not formatted; run `mpipec fmt`", path.display());
    }
}

#[test]
fn canonical_layout() {
    let messy = "use std::models::{ llama3_8b ,qwen3_8b };\n\n\n\nmodel m {   llm = llama3_8b { frozen=true;recompute=full; }\n  // why\n  enc=qwen3_8b ;}\ncut  llm|enc [0..3]+enc[3..36] ;  // the cut\nschedule transpose , interleaved( 2 ) ,1f1b(split=[1,2 ,3]);\nowner [ 0,1 ];\n";
    let expected = "use std::models::{llama3_8b, qwen3_8b};\n\nmodel m {\n    llm = llama3_8b { frozen = true; recompute = full; }\n    // why\n    enc = qwen3_8b;\n}\n\ncut llm | enc[0..3] + enc[3..36]; // the cut\nschedule transpose, interleaved(2), 1f1b(split = [1, 2, 3]);\nowner [0, 1];\n";
    assert_eq!(mpipe::fmt::format(messy).unwrap(), expected);
}

#[test]
fn comments_stay_where_they_were_written() {
    let text = "// header\n\ncluster { // the cluster\n    /* block */ devices = 8; // eight\n    pp = 8;\n    // before the end\n}\n// trailer\n";
    let formatted = mpipe::fmt::format(text).unwrap();
    assert_eq!(
        formatted,
        "// header\n\ncluster { // the cluster\n    /* block */\n    devices = 8; // eight\n    pp = 8;\n    // before the end\n}\n// trailer\n"
    );
    assert_eq!(mpipe::fmt::format(&formatted).unwrap(), formatted);
}

#[test]
fn a_comment_stays_with_the_statement_it_follows_on_a_brace_line() {
    let text = "model vlm { enc = qwen3_vl_vit { frozen = true; } // c\n    llm = qwen3_8b;\n}\n";
    let formatted = mpipe::fmt::format(text).unwrap();
    assert_eq!(formatted, "model vlm {\n    enc = qwen3_vl_vit { frozen = true; } // c\n    llm = qwen3_8b;\n}\n");
    assert_eq!(mpipe::fmt::format(&formatted).unwrap(), formatted);
}

#[test]
fn trailing_comments_align_like_a_table() {
    let text = "batch {\n    microbatches = 16; // M\n    seq_len = 8192; // tokens\n}\n";
    assert_eq!(
        mpipe::fmt::format(text).unwrap(),
        "batch {\n    microbatches = 16; // M\n    seq_len = 8192;    // tokens\n}\n"
    );
}

#[test]
fn syntax_errors_are_reported_not_formatted() {
    let err = mpipe::fmt::format("cut a |;").unwrap_err();
    assert_eq!(err.to_diagnostic().code, mpipe::diagnostics::Code::E0001);
}

#[test]
fn a_trailing_block_comment_over_several_lines() {
    // Found by cargo-fuzz (tests/fuzz/fmt_multiline_trailing_comment.mpipe): the lines inside
    // the comment shifted the alignment onto the wrong line, so a second pass changed it.
    let text = "/**/ /* one \n two */ // three\ncut a | b; // x\nowner round_robin; /* y\n z */\n";
    let once = mpipe::fmt::format(text).unwrap();
    assert_eq!(mpipe::fmt::format(&once).unwrap(), once);
    let found = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fuzz/fmt_multiline_trailing_comment.mpipe"
    ))
    .unwrap();
    let once = mpipe::fmt::format(&found).unwrap();
    assert_eq!(mpipe::fmt::format(&once).unwrap(), once);
}
