//! The documents' figures are fresh: every block of command output quoted in README.md and
//! docs/*.md, and every picture they show, is what the named command prints or writes today.
//!
//! A quoted output is marked in the Markdown as
//!
//! ````text
//! <!-- output: mpipec sim examples/paper_small.mpipe --compare -->
//! ```text
//! $ mpipec sim examples/paper_small.mpipe --compare
//! …what it prints…
//! ```
//! <!-- end output -->
//! ````
//!
//! (`stderr:` instead of `output:` quotes the diagnostics), and a picture as
//! `<!-- figure docs/x.svg: mpipec sweep … -o OUT; OUT/sweep.svg -->`. `OUT` stands for a fresh
//! directory. `MPIPEC_BLESS=1 cargo test --test docs` rewrites every block and picture from
//! its command; without it any difference fails, naming the command. A block after
//! `<!-- excerpt: COMMAND; OUT/FILE -->` quotes a few lines of a file the command writes; it
//! is checked, never rewritten.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use mpipe::diagnostics::Code;

const BLESS: &str = "MPIPEC_BLESS";

/// The Markdown files whose figures are checked.
fn documents() -> Vec<PathBuf> {
    let mut docs = common::files_under(&common::root().join("docs"), "md");
    docs.push(common::root().join("README.md"));
    docs
}

/// Runs `mpipec ARGS` in the repository root, with `OUT` replaced by a fresh directory;
/// returns stdout, stderr (both with that directory written back as `OUT`) and the directory.
fn run(command: &str, scratch: &Path) -> (String, String, PathBuf) {
    let out = scratch.join("OUT");
    let _ = std::fs::remove_dir_all(&out);
    let mut words = command.split_whitespace();
    assert_eq!(words.next(), Some("mpipec"), "a documented command must run mpipec: `{command}`");
    let args: Vec<String> = words.map(|w| w.replace("OUT", &out.to_string_lossy())).collect();
    let o = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(&args)
        .current_dir(common::root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let clean = |bytes: &[u8]| String::from_utf8_lossy(bytes).replace(&*out.to_string_lossy(), "OUT");
    (clean(&o.stdout), clean(&o.stderr), out)
}

/// A command as a reader types it: arguments with shell characters quoted.
fn shown(command: &str) -> String {
    let words: Vec<String> = command
        .split_whitespace()
        .map(|w| if w.contains(['*', '(', ')', '?', '[']) { format!("'{w}'") } else { w.to_string() })
        .collect();
    words.join(" ")
}

/// Checks an `excerpt: COMMAND; OUT/FILE` marker: the block after it is a run of lines of
/// the file the command writes. Such a block is not regenerated; a stale one fails, naming
/// the command.
fn check_excerpt<'a>(rest: &str, mut after: impl Iterator<Item = &'a str>, scratch: &Path) {
    let (command, file) = rest.trim_start_matches(": ").rsplit_once("; ").expect("`excerpt: COMMAND; OUT/FILE`");
    let (_, _, dir) = run(command, scratch);
    let written = std::fs::read_to_string(dir.join(file.trim_start_matches("OUT/")))
        .unwrap_or_else(|e| panic!("`{command}` wrote no {file}: {e}"));
    let block: String = after.by_ref().skip(1).take_while(|l| l.trim() != "```").collect();
    assert!(!block.is_empty() && written.contains(&block), "`{command}` writes no {file} with these lines:\n{block}");
}

/// The document with every marked block regenerated, and the pictures each marker names with
/// what their commands write now.
fn regenerate(text: &str, scratch: &Path) -> (String, Vec<(PathBuf, String, String)>) {
    let mut out = String::new();
    let mut pictures = Vec::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        out.push_str(line);
        let marker = line.trim().strip_prefix("<!-- ").and_then(|l| l.strip_suffix(" -->"));
        let Some(marker) = marker else { continue };
        if let Some(rest) = marker.strip_prefix("figure ") {
            let (path, command) = rest.split_once(": ").expect("`figure PATH: COMMAND; OUT/FILE`");
            let (command, file) = command.rsplit_once("; ").expect("`figure PATH: COMMAND; OUT/FILE`");
            let (_, _, dir) = run(command, scratch);
            let written = std::fs::read_to_string(dir.join(file.trim_start_matches("OUT/")))
                .unwrap_or_else(|e| panic!("`{command}` wrote no {file}: {e}"));
            pictures.push((common::root().join(path), written, command.to_string()));
            continue;
        }
        if let Some(rest) = marker.strip_prefix("excerpt") {
            check_excerpt(rest, lines.clone(), scratch);
            continue;
        }
        let (stream, command) = match marker.split_once(": ") {
            Some(("output", c)) => (0, c),
            Some(("stderr", c)) => (1, c),
            _ => continue,
        };
        let (stdout, stderr, _) = run(command, scratch);
        let printed = if stream == 0 { stdout } else { stderr };
        out.push_str(&format!("```text\n$ {}\n{}```\n", shown(command), printed));
        for skipped in lines.by_ref() {
            if skipped.trim() == "<!-- end output -->" {
                out.push_str(skipped);
                break;
            }
        }
    }
    (out, pictures)
}

#[test]
fn quoted_outputs_and_pictures_are_what_their_commands_give() {
    let scratch = std::env::temp_dir().join(format!("mpipec-docs-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let bless = std::env::var_os(BLESS).is_some();
    let mut stale = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let (fresh, pictures) = regenerate(&text, &scratch);
        checked += pictures.len() + text.matches("<!-- end output -->").count();
        if fresh != text {
            if bless {
                std::fs::write(&doc, &fresh).unwrap();
            } else {
                stale.push(format!("{}: a quoted output differs from what its command prints", doc.display()));
            }
        }
        for (path, written, command) in pictures {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(written.as_str()) {
                if bless {
                    std::fs::write(&path, written).unwrap();
                } else {
                    stale.push(format!("{} is not what `{command}` writes", path.display()));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(checked >= 4, "the documents quote fewer figures than they did ({checked})");
    assert!(stale.is_empty(), "{}\nregenerate them with `{BLESS}=1 cargo test --test docs`", stale.join("\n"));
}

/// Every relative link of the documents leads to a file of the repository.
#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for target in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            let file = target.split('#').next().unwrap();
            if file.is_empty() || file.contains("://") {
                continue;
            }
            if !doc.parent().unwrap().join(file).exists() {
                broken.push(format!("{}: {target}", doc.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

/// The field tables of docs/language.md list every field the checker knows, no more.
#[test]
fn the_language_reference_lists_every_field() {
    use mpipe::check::schema::{BATCH, CLUSTER, DECODER, ENCODER, HARDWARE, LINK, MLA, MOE, PART};
    let doc = std::fs::read_to_string(common::root().join("docs/language.md")).unwrap();
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
    let mut missing = Vec::new();
    for schema in [&HARDWARE, &LINK, &ENCODER, &DECODER, &MOE, &MLA, &PART, &CLUSTER, &BATCH] {
        for field in schema.fields {
            let row = format!("| `{}` | {} |", field.name, if field.required { "required" } else { "optional" });
            if !rows.iter().any(|r| r.starts_with(&row) && r.contains(field.doc)) {
                missing.push(format!("{} in {}", field.name, schema.context));
            }
        }
    }
    assert!(missing.is_empty(), "docs/language.md does not describe: {}", missing.join(", "));
}

/// A newcomer reads the README's first lines and runs them: they must stay the two commands
/// that build the example and run every test.
#[test]
fn the_readme_starts_with_the_two_commands() {
    let readme = std::fs::read_to_string(common::root().join("README.md")).unwrap();
    let start = "# mpipec\n\n```sh\ncargo run --release -- build examples/paper_small.mpipe -o out/\ncargo test\n```\n";
    assert!(readme.starts_with(start), "README.md must start with:\n{start}");
}

/// The words a code is known by: its summary and first paragraph of explanation, and the
/// messages of its fixtures under tests/ui,
/// each cut to its first four letters so `files` meets `file`.
fn vocabulary() -> std::collections::BTreeMap<Code, BTreeSet<String>> {
    let mut words: std::collections::BTreeMap<Code, BTreeSet<String>> =
        Code::ALL.iter().map(|c| (*c, terms(c.explain().split("\n\n").take(2).collect::<String>().as_str()))).collect();
    let loader = common::ui_loader();
    for common::Fixture { key, bytes, set, .. } in common::ui_fixtures() {
        let checked = mpipe::driver::load(&key, &key, bytes, &loader).check(&loader, &set);
        for d in mpipe::diagnose(&checked, mpipe::Depth::Build) {
            words.entry(d.code).or_default().extend(terms(&d.message));
        }
    }
    words
}

fn terms(text: &str) -> BTreeSet<String> {
    const COMMON: &[&str] = &[
        "that",
        "with",
        "this",
        "than",
        "does",
        "from",
        "have",
        "their",
        "other",
        "otherwise",
        "when",
        "which",
        "what",
        "where",
        "would",
        "must",
        "also",
        "only",
        "each",
        "every",
        "some",
        "more",
        "plan",
        "mpipec",
    ];
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() >= 4 && !COMMON.contains(&w.to_ascii_lowercase().as_str()))
        .map(|w| w.to_ascii_lowercase().chars().take(4).collect())
        .collect()
}

/// Every `what it is (E0202)` in the documents names the code that says so: the words of the
/// clause before the parenthesis share no fewer with that code's summary and messages than with
/// any other code of its family (E02xx), the codes one mixes up.
#[test]
fn codes_in_the_documents_name_what_they_mean() {
    let vocabulary = vocabulary();
    let mut wrong = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap().replace('\n', " ");
        for (open, _) in text.match_indices('(') {
            let inside = &text[open + 1..open + 1 + text[open + 1..].find(')').unwrap_or(0)];
            let codes: Vec<Code> = inside
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .take_while(|w| Code::parse(w).is_some())
                .filter_map(Code::parse)
                .collect();
            if codes.is_empty() {
                continue;
            }
            let clause_start = text[..open].rfind([',', ';', '(', '.']).map_or(0, |i| i + 1);
            let clause = terms(&text[clause_start..open]);
            let score = |c: &Code| vocabulary[c].intersection(&clause).count();
            // Codes of one family (E02xx) are the ones a writer mixes up.
            let family = |c: &Code| c.as_str()[..3].to_string();
            let best = |c: &Code| Code::ALL.iter().filter(|o| family(o) == family(c)).map(score).max().unwrap_or(0);
            for code in &codes {
                // A clause of one word (`and warns`) says too little to judge.
                if codes.len() == 1 && clause.len() >= 2 && score(code) < best(code) {
                    wrong.push(format!(
                        "{}: `{}` ({})",
                        doc.file_name().unwrap().to_string_lossy(),
                        text[clause_start..open].trim(),
                        code.as_str()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "codes that do not mean what the text around them says:\n{}", wrong.join("\n"));
}

/// A setup script that downloads says first what and how big, on stderr, and the tests run
/// every setup script through `common::setup`, which leaves that stderr on the terminal of the
/// person running `cargo test` (and in CI's log) instead of capturing it with the test.
#[test]
fn downloads_are_announced_where_a_person_sees_them() {
    let mut wrong = Vec::new();
    let scripts = std::fs::read_dir(common::root().join("scripts")).unwrap().map(|e| e.unwrap().path());
    for script in scripts.filter(|p| p.is_file() && p.extension().is_none()) {
        let text = std::fs::read_to_string(&script).unwrap();
        let name = script.file_name().unwrap().to_string_lossy().into_owned();
        let log_to_stderr = text.lines().any(|l| l.starts_with("log()") && l.contains(">&2"));
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let installs =
                ["pip install", "apt-get install", "npm install", "cargo install"].iter().any(|c| line.contains(c));
            if !installs || line.trim_start().starts_with('#') {
                continue;
            }
            // The size may be set a few lines up (`size="about 4 GB …"`) and said in the `==>` line.
            let before = &lines[i.saturating_sub(12)..i];
            let sized = before.iter().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.windows(2).any(|w| {
                    let unit = w[1].trim_end_matches(|c: char| !c.is_alphabetic());
                    w[0].parse::<f64>().is_ok() && ["KB", "MB", "GB"].contains(&unit)
                })
            });
            let said = before.iter().any(|l| {
                (l.contains("==>") && l.contains(">&2")) || (l.trim_start().starts_with("log ") && log_to_stderr)
            });
            let announced = sized && said;
            if !announced {
                wrong.push(format!("scripts/{name}:{}: installs without saying how big, on stderr, first", i + 1));
            }
        }
    }
    for test in common::files_under(&common::root().join("tests"), "rs") {
        let text = std::fs::read_to_string(&test).unwrap();
        if test.ends_with("common/mod.rs") || test.ends_with("tests/docs.rs") {
            continue; // the helper itself, and this test's own needle
        }
        for (i, line) in text.lines().enumerate() {
            if line.contains("Command::new") && line.contains("scripts") {
                wrong.push(format!("{}:{}: runs a setup script, not through common::setup", test.display(), i + 1));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
