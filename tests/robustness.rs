//! Malformed input of every kind gives diagnostics, never a panic or a hang: truncated
//! files, byte soup, token soup, extreme numbers, deep nesting and a 10 MB file.

mod common;

use mpipe::random::Lcg;

use mpipe::diagnostics::Code;
use mpipe::resolve::loader::MemoryLoader;

/// Checks `bytes` and holds every diagnostic to what a user needs of it: a label inside the
/// file it names (E0208, a missing section, has nothing to point at).
fn check(bytes: Vec<u8>) -> mpipe::driver::Compiled {
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", bytes, &MemoryLoader::new());
    for d in &checked.diagnostics {
        assert!(!d.labels.is_empty() || d.code == Code::E0208, "{d:?} has no label");
        for l in &d.labels {
            let file = checked.program.sources.get(l.span.file);
            assert!(
                l.span.start <= l.span.end && l.span.end as usize <= file.text.len(),
                "{d:?} points outside its file"
            );
        }
    }
    checked
}

#[test]
fn every_prefix_of_every_example() {
    for path in common::files_under(&common::root().join("examples"), "mpipe") {
        let text = std::fs::read_to_string(&path).unwrap();
        for (cut, _) in text.char_indices().step_by(3) {
            check(text.as_bytes()[..cut].to_vec());
        }
    }
}

#[test]
fn byte_soup() {
    let mut rng = Lcg::new(7);
    for _ in 0..300 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let utf8 = std::str::from_utf8(&bytes).is_ok();
        let checked = check(bytes);
        if !utf8 {
            assert_eq!(checked.diagnostics.first().map(|d| d.code), Some(Code::E0002), "bytes that are not UTF-8");
        }
    }
}

#[test]
fn token_soup() {
    let tokens = [
        "cut",
        "schedule",
        "owner",
        "model",
        "cluster",
        "batch",
        "hardware",
        "encoder",
        "decoder",
        "use",
        "std",
        "::",
        "{",
        "}",
        "[",
        "]",
        "(",
        ")",
        ";",
        ",",
        "|",
        "+",
        "=",
        "..",
        "enc",
        "llm",
        "1f1b",
        "transpose",
        "8",
        "0",
        "1.5GB",
        "\"s\"",
        "true",
        "// c\n",
        "/* c */",
        "interleaved",
        "pp",
        "devices",
        "image_tokens",
        "\n",
        "é",
    ];
    let mut rng = Lcg::new(11);
    for _ in 0..2000 {
        let n = rng.below(40);
        let text: Vec<&str> = (0..n).map(|_| tokens[rng.below(tokens.len())]).collect();
        let text = text.join(" ");
        let checked = check(text.clone().into_bytes());
        // What formats is a file that parses, and formatting it again changes nothing.
        if let Ok(once) = mpipe::fmt::format(&text) {
            assert!(!checked.diagnostics.iter().any(|d| d.code == Code::E0001), "{text:?} formats but does not parse");
            assert_eq!(mpipe::fmt::format(&once).as_ref(), Ok(&once), "{text:?}");
        }
    }
}

#[test]
fn mutated_examples() {
    let mut rng = Lcg::new(13);
    let text = std::fs::read_to_string(common::root().join("examples/paper_small.mpipe")).unwrap();
    let replacements = ["0", "4294967296", "99999999999999999999999", "1e308", "-1", "2.5", "x", "transpose", "[]", ""];
    for _ in 0..500 {
        let mut t = text.clone();
        for _ in 0..3 {
            let words: Vec<(usize, &str)> = t.match_indices(|c: char| c.is_ascii_digit()).collect();
            if words.is_empty() {
                break;
            }
            let (at, _) = words[rng.below(words.len())];
            let with = replacements[rng.below(replacements.len())];
            t.replace_range(at..at + 1, with);
        }
        // Every mutant is still a whole plan: it checks, or says why not.
        let checked = check(t.clone().into_bytes());
        assert!(checked.plan.is_some() || checked.has_errors(), "{t}");
    }
}

#[test]
fn extreme_counts_are_refused_not_overflowed() {
    let text = std::fs::read_to_string(common::root().join("examples/llm_1f1b.mpipe")).unwrap();
    for (from, to) in
        [("devices = 8;", "devices = 4294967296;"), ("pp = 4;", "pp = 4294967296;"), ("dp = 2;", "dp = 4294967296;")]
    {
        let checked = check(text.replace(from, to).into_bytes());
        assert!(checked.has_errors(), "{to} is accepted");
    }
    let checked = check(text.replace("dp = 2;", "dp = 99999999999999999999;").into_bytes());
    assert!(checked.diagnostics.iter().any(|d| d.code == Code::E0207));
}

#[test]
fn deep_nesting_is_refused_before_parsing() {
    for open in ["[", "{", "("] {
        let text = format!("owner {}", open.repeat(200_000));
        let checked = check(text.into_bytes());
        assert_eq!(checked.diagnostics[0].code, Code::E0003);
    }
}

#[test]
fn a_ten_megabyte_plan() {
    let mut text = std::fs::read_to_string(common::root().join("examples/llm_1f1b.mpipe")).unwrap();
    let mut i = 0;
    while text.len() < 10 << 20 {
        text.push_str(&format!(
            "\nhardware npu_{i} {{\n    peak_bf16 = 300TFLOP/s;\n    hbm = 64GB;\n    hbm_bandwidth = 1.6TB/s;\n    devices_per_node = 8;\n    intra_node {{ alpha = 10us; beta = 28GB/s; }}\n    inter_node {{ alpha = 20us; beta = 25GB/s; }}\n}}\n"
        ));
        i += 1;
    }
    let checked = check(text.clone().into_bytes());
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics.first());
    assert!(checked.plan.is_some());
    mpipe::fmt::format(&text).unwrap();
}

#[test]
fn far_past_real_use_is_refused_fast() {
    // P = 4096, M = 65536: hundreds of millions of events; refused by the checker (E0318)
    // before any of them is built.
    let text = std::fs::read_to_string(common::root().join("examples/llm_1f1b.mpipe"))
        .unwrap()
        .replace("devices = 8;", "devices = 8192;")
        .replace("pp = 4;", "pp = 4096;")
        .replace("microbatches = 8;", "microbatches = 65536;");
    let text = text.replace(
        "use std::models::llama3_8b;",
        "decoder big { layers = 8192; hidden = 64; ffn = 256; heads = 4; vocab = 100; }",
    );
    let text = text.replace("llm = llama3_8b;", "llm = big;");
    let checked = check(text.into_bytes());
    let codes: Vec<Code> = checked.diagnostics.iter().map(|d| d.code).collect();
    assert!(codes.contains(&Code::E0318), "{codes:?}");
    assert!(checked.plan.is_none());
}

/// Just past the limit (64 stages × 8,000 microbatches of 1F1B, about 1.02 million events and
/// three million instructions): refused with the diagnostic that names the limit, and a build
/// writes nothing rather than running out of memory.
#[test]
fn a_plan_past_the_size_limit_is_refused_by_name() {
    let text = mpipe::bench::plan_text(64, 8000).replace("schedule interleaved(2);", "schedule 1f1b;");
    let checked = check(text.clone().into_bytes());
    let limit = checked.diagnostics.iter().find(|d| d.code == Code::E0318).expect("E0318");
    assert!(limit.notes.iter().any(|n| n.contains(&mpipe::check::MAX_EVENTS.to_string())), "{:?}", limit.notes);
    assert!(checked.plan.is_none());
    let dir = std::env::temp_dir().join(format!("mpipec-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("big.mpipe"), text).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(["build", "--allow-outside"])
        .arg(dir.join("big.mpipe"))
        .arg("-o")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("E0318"));
    assert!(!dir.join("out").exists(), "nothing is written");
    std::fs::remove_dir_all(&dir).unwrap();
}
