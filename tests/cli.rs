//! The real binary: exit codes, streams, colour, message formats, fmt, explain, and the
//! same diagnostics as the library for every fixture.

mod common;

use std::process::{Command, Output};

use mpipe::diagnostics::Code;

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mpipec"));
    command.args(args).current_dir(common::root()).env_remove("NO_COLOR");
    command
}

fn mpipec(args: &[&str]) -> Output {
    command(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn examples_check_clean() {
    for path in common::files_under(&common::root().join("examples"), "mpipe") {
        let o = mpipec(&["check", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", path.display(), stderr(&o));
        // W0004 is what an example's `target …(nearest)` asks for; nothing else may show, but
        // for W0003 on a published run: it is written as its source ran it, and where the run
        // saved memory in ways a plan cannot say (FSDP sharding the weights), the warning is
        // what the cost model honestly concludes.
        let err = stderr(&o);
        let published = path.to_string_lossy().contains("/published/");
        let allowed = |l: &&str| l.starts_with("warning[W0004]") || (published && l.starts_with("warning[W0003]"));
        let headlines: Vec<&str> = err.lines().filter(|l| l.contains("[E") || l.contains("[W")).collect();
        assert!(headlines.iter().all(allowed), "{}: {headlines:?}", path.display());
    }
}

/// A diagnostic as the JSON lines say it: code, message and label spans.
type Said = (String, String, Vec<u64>);

/// The diagnostics `mpipec --message-format json ARGS` printed, and its exit status.
fn said(args: &[String]) -> (Vec<Said>, Option<i32>) {
    let o = mpipec(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (summary, diagnostics) = lines.split_last().unwrap();
    assert_eq!(summary["type"], "summary");
    let said = diagnostics
        .iter()
        .map(|d| {
            let spans = d["labels"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|l| [l["byte_start"].as_u64().unwrap(), l["byte_end"].as_u64().unwrap()])
                .collect();
            (d["code"].as_str().unwrap().to_string(), d["message"].as_str().unwrap().to_string(), spans)
        })
        .collect();
    (said, o.status.code())
}

/// `check`, `build` and the library (`diagnose`, what the UI snapshots record) give every
/// fixture the same diagnostics; `check` in the library's order.
#[test]
fn fixtures_give_the_library_diagnostics_in_check_and_build() {
    let loader = common::ui_loader();
    let out = temp_dir("fixtures");
    for common::Fixture { key, bytes, set, .. } in common::ui_fixtures() {
        let lib = mpipe::driver::load(&key, &key, bytes, &loader).check(&loader, &set);
        let shown = format!("tests/ui/{key}");
        let folder = key.rsplit_once('/').map_or("", |(f, _)| f);
        let want: Vec<Said> = mpipe::diagnose(&lib, mpipe::Depth::Build)
            .iter()
            .map(|d| {
                (
                    d.code.as_str().to_string(),
                    // Files the fixture names beside it (a histogram) are shown from tests/ui too.
                    d.message.replace(&key, &shown).replace(&format!("`{folder}/"), &format!("`tests/ui/{folder}/")),
                    d.labels.iter().flat_map(|l| [l.span.start as u64, l.span.end as u64]).collect(),
                )
            })
            .collect();
        let sets: Vec<String> = set.iter().map(|(k, v)| format!("--set={k}={v}")).collect();
        let args = |command: &[&str]| -> Vec<String> {
            ["--message-format", "json"].iter().chain(command).map(|a| a.to_string()).chain(sets.clone()).collect()
        };
        let (checked, status) = said(&args(&["check", &shown]));
        assert_eq!(checked, want, "{key}: check");
        let errors = want.iter().any(|(code, ..)| code.starts_with('E'));
        assert_eq!(status, Some(if errors { 1 } else { 0 }), "{key}: check");
        let (mut built, _) = said(&args(&["build", &shown, "-o", out.join("o").to_str().unwrap(), "--force"]));
        let mut want = want;
        built.sort();
        want.sort();
        assert_eq!(built, want, "{key}: build");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn human_output_goes_to_stderr_without_colour_off_a_terminal() {
    let o = mpipec(&["check", "tests/ui/algebra/arity.mpipe"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with("error[E0305]: 1 skeleton for 2 regions\n"), "{err}");
    assert!(err.contains("┌─ tests/ui/algebra/arity.mpipe:24:1"));
    assert!(err.trim_end().ends_with("error: 1 error emitted"));
    assert!(!err.contains('\u{1b}'), "no ANSI colour when stderr is not a terminal");
    assert_eq!(stdout(&o), "");
}

#[test]
fn colour_always_and_never() {
    let o = mpipec(&["--color", "always", "check", "tests/ui/algebra/arity.mpipe"]);
    assert!(stderr(&o).contains('\u{1b}'));
    let o = mpipec(&["--color", "never", "check", "tests/ui/algebra/arity.mpipe"]);
    assert!(!stderr(&o).contains('\u{1b}'));
}

#[test]
fn short_format() {
    let o = mpipec(&["--message-format", "short", "check", "tests/ui/algebra/arity.mpipe"]);
    let err = stderr(&o);
    assert!(err.starts_with("tests/ui/algebra/arity.mpipe:24:1: error[E0305]: 1 skeleton for 2 regions"), "{err}");
}

#[test]
fn json_labels_carry_lines_and_columns() {
    let o = mpipec(&["--message-format", "json", "check", "tests/ui/algebra/unknown_skeleton.mpipe"]);
    let first: serde_json::Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(first["code"], "E0306");
    let label = &first["labels"][0];
    assert_eq!((label["line_start"].as_u64(), label["column_start"].as_u64()), (Some(24), Some(21)));
    assert_eq!(label["primary"], true);
    assert!(first["rendered"].as_str().unwrap().contains("did you mean `1f1b`?"));
}

#[test]
fn io_errors_exit_2() {
    let o = mpipec(&["check", "no/such/plan.mpipe"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("error: cannot read `no/such/plan.mpipe`: no such file"), "{}", stderr(&o));
    let o = mpipec(&["check"]);
    assert_eq!(o.status.code(), Some(2), "clap usage errors exit 2");
}

#[test]
fn explain_every_code() {
    for code in Code::ALL {
        let o = mpipec(&["explain", code.as_str()]);
        assert_eq!(o.status.code(), Some(0));
        assert_eq!(stdout(&o), code.explain());
    }
    let o = mpipec(&["explain", "e0312"]);
    assert_eq!(o.status.code(), Some(0), "codes are case-insensitive");
}

#[test]
fn explain_lists_every_code_with_its_title() {
    let o = mpipec(&["explain", "--list"]);
    assert_eq!(o.status.code(), Some(0));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    let expected: Vec<String> = Code::ALL.iter().map(|c| format!("{}  {}", c.as_str(), c.summary())).collect();
    assert_eq!(lines, expected);
}

#[test]
fn std_lists_every_definition_of_the_standard_library() {
    let o = mpipec(&["std"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for (module, name, _) in mpipe::resolve::stdlib::index() {
        assert!(out.lines().any(|l| l.starts_with(&format!("{name} "))), "{module}::{name} is not listed:\n{out}");
    }
    assert!(out.contains("989.5 TFLOP/s"), "h100_sxm's dense bf16 peak:\n{out}");
    let models = stdout(&mpipec(&["std", "models"]));
    assert!(models.contains("llama3_8b") && !models.contains("h100_sxm"), "{models}");
}

#[test]
fn help_says_what_arguments_are_and_what_build_writes() {
    let build = stdout(&mpipec(&["build", "--help"]));
    for output in ["plan.json", "plan.txt", "report.json", "timeline.svg", "timeline.json", "schedule.csv"] {
        assert!(build.contains(output), "build --help does not name {output}:\n{build}");
    }
    for command in ["build", "sim", "sweep", "tune", "verify", "check", "fmt", "explain"] {
        let help = stdout(&mpipec(&[command, "--help"]));
        let arguments = help.split("Arguments:").nth(1).unwrap_or_else(|| panic!("{command} --help:\n{help}"));
        let first = arguments.lines().find(|l| !l.trim().is_empty()).unwrap();
        // `<PLAN>  The plan …` (short help) or the text on the next line (long help).
        assert!(
            first.trim().split_once("  ").is_some() || arguments.lines().nth(2).is_some_and(|l| !l.trim().is_empty()),
            "{command}: a positional argument without text:\n{help}"
        );
    }
    for command in ["explain", "std", "lsp", "bench"] {
        let help = stdout(&mpipec(&[command, "--help"]));
        assert!(!help.contains("--set") && !help.contains("--message-format"), "{command} --help:\n{help}");
    }
    assert!(stdout(&mpipec(&["sim", "--help"])).contains("--set"));
}

#[test]
fn explain_unknown_code_suggests() {
    let o = mpipec(&["explain", "E0399"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("error: unknown diagnostic code `E0399`"));
    assert!(err.contains("help: did you mean `E0309`?"), "{err}");
}

#[test]
fn fmt_check_and_in_place() {
    let o = mpipec(&["fmt", "--check", "examples/paper_small.mpipe", "stdlib/models.mpipe"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = std::env::temp_dir().join(format!("mpipec-fmt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("messy.mpipe");
    std::fs::write(&file, "cut  a|b ;\n").unwrap();
    let o = mpipec(&["fmt", "--check", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("would reformat"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "cut  a|b ;\n", "--check changes nothing");
    let o = mpipec(&["fmt", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "cut a | b;\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fmt_stdin() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(["fmt", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"owner   round_robin ;").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(stdout(&o), "owner round_robin;\n");
}

#[test]
fn fmt_reports_syntax_errors() {
    let o = mpipec(&["fmt", "--check", "tests/ui/syntax/missing_semicolon.mpipe"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("error[E0001]"));
}

#[test]
fn imports_cannot_leave_the_project_unless_allowed() {
    let o = mpipec(&["check", "tests/ui/imports/outside_root.mpipe"]);
    assert!(stderr(&o).contains("error[E0107]"));
    let o = mpipec(&["--allow-outside", "check", "tests/ui/imports/outside_root.mpipe"]);
    assert!(!stderr(&o).contains("E0107") && stderr(&o).contains("error[E0102]"), "{}", stderr(&o));
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mpipec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn build_writes_plan_files_deterministically() {
    let dir = temp_dir("build");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for out in [&a, &b] {
        let o = mpipec(&["build", "examples/llm_1f1b.mpipe", "-o", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    for file in ["plan.json", "plan.txt", "schedule.csv", ".mpipec-manifest"] {
        let (x, y) = (std::fs::read(a.join(file)).unwrap(), std::fs::read(b.join(file)).unwrap());
        assert_eq!(x, y, "{file} differs between two builds");
    }
    let o = mpipec(&["build", "examples/paper_small.mpipe", "-o", a.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "rebuilding over mpipec's own output is fine: {}", stderr(&o));
    assert!(
        !a.join("schedule.csv").exists(),
        "a plan with a replicated region has no schedule.csv, and the old one is gone"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The torch target writes its Python package beside the launcher: the `wrote` line counts the
/// package's files instead of naming each of them.
#[test]
fn build_counts_the_files_of_a_package_folder() {
    let dir = temp_dir("wrote");
    let o = mpipec(&["build", "examples/llm_1f1b.mpipe", "--target", "torch", "-o", dir.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = stderr(&o).lines().find(|l| l.starts_with("wrote ")).unwrap_or_default().to_string();
    let files = common::files_under(&dir.join("torch/python"), "py").len();
    assert!(files > 4, "{files} files under torch/python");
    assert!(line.contains(&format!("torch/python/ ({files} files)")), "{line}");
    assert!(line.contains("torch/launch.sh") && !line.contains("executor.py"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--plan-format` picks the encoding; a rebuild in the other one leaves no stale plan behind,
/// and the torch launcher passes whichever plan the build wrote.
#[test]
fn build_writes_the_plan_format_asked_for() {
    let dir = temp_dir("format");
    let out = dir.join("out");
    let build = |format: &str| {
        let o = mpipec(&[
            "build",
            "examples/llm_1f1b.mpipe",
            "--target",
            "torch",
            "--plan-format",
            format,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    };
    build("compact");
    assert!(out.join("plan.compact.json").exists() && !out.join("plan.json").exists());
    let compact = std::fs::read_to_string(out.join("plan.compact.json")).unwrap();
    let launch = std::fs::read_to_string(out.join("torch/launch.sh")).unwrap();
    assert!(launch.contains(r#"plan="$here/../plan.json""#) && launch.contains(r#"plan="$here/../plan.compact.json""#));
    build("readable");
    assert!(out.join("plan.json").exists() && !out.join("plan.compact.json").exists());
    let readable = std::fs::read_to_string(out.join("plan.json")).unwrap();
    assert_eq!(mpipe::ir::compact::read(&compact).unwrap(), serde_json::from_str(&readable).unwrap());
    build("auto");
    assert!(out.join("plan.json").exists(), "a small plan is readable by default");
    let o = mpipec(&["build", "examples/llm_1f1b.mpipe", "--plan-format", "binary", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "an unknown format is a usage error");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn build_never_replaces_files_it_did_not_write() {
    let dir = temp_dir("foreign");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = mpipec(&["build", "examples/llm_1f1b.mpipe", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("refusing to write into"), "{}", stderr(&o));
    assert!(!out.join("plan.json").exists());
    let o = mpipec(&["build", "examples/llm_1f1b.mpipe", "-o", out.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(out.join("notes.txt")).unwrap(), "mine", "--force keeps foreign files");
    assert!(out.join("plan.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn build_with_errors_writes_nothing() {
    let dir = temp_dir("errors");
    let out = dir.join("out");
    let o = mpipec(&["build", "tests/ui/algebra/arity.mpipe", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("error[E0305]"));
    assert!(!out.exists());
    let o = mpipec(&["build", "examples/llm_1f1b.mpipe", "-o", out.to_str().unwrap(), "--set", "cluster.pp=3"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("error[E0308]") && stderr(&o).contains("--set cluster.pp=3"), "{}", stderr(&o));
    assert!(!out.exists());
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(entries.is_empty(), "no staging directory is left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn build_with_overrides() {
    let dir = temp_dir("set");
    let out = dir.join("out");
    let o = mpipec(&[
        "build",
        "examples/llm_1f1b.mpipe",
        "-o",
        out.to_str().unwrap(),
        "--set",
        "cluster.pp=8",
        "--set",
        "cluster.dp=1",
        "--set",
        "schedule=interleaved(2)",
        "--set",
        "batch.microbatches=16",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["pipeline"]["ranks"], 8);
    assert_eq!(plan["pipeline"]["microbatches"], 16);
    assert_eq!(plan["regions"][0]["skeleton"], "interleaved(2)");
    let o = mpipec(&["check", "examples/llm_1f1b.mpipe", "--set", "nonsense"]);
    assert_eq!(o.status.code(), Some(2), "a malformed --set is a usage error");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_symlink_cannot_smuggle_a_file_in() {
    let dir = temp_dir("symlink");
    let outside = temp_dir("symlink-outside");
    std::fs::write(
        outside.join("secret.mpipe"),
        "encoder x { layers = 1; hidden = 8; ffn = 8; heads = 1; patch = 1; }\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("secret.mpipe"), dir.join("link.mpipe")).unwrap();
    std::fs::write(dir.join("plan.mpipe"), "use \"link.mpipe\"::{x};\n").unwrap();
    let o = mpipec(&["check", dir.join("plan.mpipe").to_str().unwrap()]);
    assert!(stderr(&o).contains("error[E0107]"), "{}", stderr(&o));
    let o = mpipec(&["--allow-outside", "check", dir.join("plan.mpipe").to_str().unwrap()]);
    assert!(!stderr(&o).contains("E0107"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

// Guards: refusals that come before the cost, and messages that name the real cause.

#[test]
fn a_sweep_too_large_is_refused_from_the_sizes_of_its_ranges() {
    let o = mpipec(&[
        "sweep",
        "examples/paper_small.mpipe",
        "--vary",
        "batch.image_tokens=1..4000+1",
        "--vary",
        "batch.seq_len=1..4000+1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("the sweep has 16000000 points (4000 × 4000), more than 4096"), "{}", stderr(&o));
}

#[test]
fn a_misspelled_sweep_key_is_one_error_with_a_suggestion() {
    let o = mpipec(&["sweep", "examples/paper_small.mpipe", "--vary", "batch.imagetokens=1,2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.matches("error[E0202]").count(), 1, "{err}");
    assert!(err.contains("did you mean `image_tokens`?"), "{err}");
    assert_eq!(stdout(&o), "", "no table for a sweep that cannot run");
    let o = mpipec(&["sweep", "examples/paper_small.mpipe", "--vary", "clustr.pp=2,4"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(stderr(&o).matches("error[E0109]").count(), 1, "{}", stderr(&o));
}

#[test]
fn check_of_an_empty_file_agrees_with_build() {
    let dir = temp_dir("empty-plan");
    let empty = dir.join("empty.mpipe");
    std::fs::write(&empty, "// nothing here yet\n").unwrap();
    let check = mpipec(&["check", empty.to_str().unwrap()]);
    let build = mpipec(&["build", empty.to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
    assert_eq!(check.status.code(), build.status.code());
    assert!(stderr(&check).contains("defines no plan"), "{}", stderr(&check));
    let library = mpipec(&["check", "examples/lib/vision.mpipe"]);
    assert_eq!(library.status.code(), Some(0), "a file of definitions still checks: {}", stderr(&library));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_binary_image_histogram_is_named_as_not_text() {
    let dir = temp_dir("binary-histogram");
    let plan = std::fs::read_to_string(common::root().join("examples/vlm_zero_bubble.mpipe")).unwrap();
    std::fs::write(dir.join("plan.mpipe"), plan.replace("lib/siglip_tokens.csv", "tokens.bin")).unwrap();
    std::fs::write(dir.join("tokens.bin"), [0x89, b'P', b'N', b'G', 0, 0, 0xff, 0xfe]).unwrap();
    let o = mpipec(&["check", dir.join("plan.mpipe").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("error[E0002]: `tokens.bin` is not a text file"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("out of range"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_count_of_zero_is_refused_by_the_option_that_gave_it() {
    for args in [
        &["sim", "examples/paper_small.mpipe", "--samples", "0"][..],
        &["tune", "examples/paper_small.mpipe", "--devices", "0"],
        &["tune", "examples/paper_small.mpipe", "--per-batch", "0"],
    ] {
        let o = mpipec(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let option = args[2];
        assert!(stderr(&o).contains(&format!("invalid value '0' for '{option}")), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("at least 1"), "{}", stderr(&o));
    }
    let o = mpipec(&["tune", "examples/paper_small.mpipe", "--devices", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no candidate runs on 1 device"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("memory"), "{}", stderr(&o));
}

#[test]
fn a_build_too_large_to_write_is_refused_before_it_is_derived() {
    let dir = temp_dir("large-output");
    let out = dir.join("out");
    let args =
        ["build", "examples/paper_small.mpipe", "--set", "batch.microbatches=55000", "-o", out.to_str().unwrap()];
    let o = mpipec(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("this build would write about"), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than 256 MB; nothing was written"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--large-output"), "{}", stderr(&o));
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "nothing is written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_interrupted_build_leaves_no_output_folder() {
    use std::os::unix::process::ExitStatusExt;
    let dir = temp_dir("interrupted");
    let out = dir.join("out");
    // About 60 MB to write: long enough to be interrupted in the middle of it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(["build", "examples/llm_1f1b.mpipe", "--set", "batch.microbatches=20000", "-o", out.to_str().unwrap()])
        .current_dir(common::root())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let staging = dir.join(format!(".out.new-{}", child.id()));
    while !staging.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the build ended before it began writing");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.signal(), Some(2), "ended by the SIGINT it caught: {}", stderr(&o));
    assert!(stderr(&o).contains("interrupted: nothing was written to"), "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "an interrupted build leaves {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sim_leaves_out_columns_that_are_zero_on_every_rank() {
    let text_only = stdout(&mpipec(&["sim", "examples/llm_1f1b.mpipe"]));
    assert!(
        text_only.contains("slack w_r") && !text_only.contains("encoder E_r") && !text_only.contains("spill"),
        "{text_only}"
    );
    let with_encoder = stdout(&mpipec(&["sim", "examples/paper_small.mpipe"]));
    assert!(with_encoder.contains("encoder E_r") && with_encoder.contains("spill"), "{with_encoder}");
}

/// `verify --steps 0` would compare nothing and `--procs 0` would blame `--set`s the user never
/// typed: both are refused naming the flag, before any Python starts.
#[test]
fn verify_refuses_zero_steps_and_zero_procs_naming_the_flag() {
    for (flag, name) in [("--steps", "--steps <STEPS>"), ("--procs", "--procs <PROCS>")] {
        let o = mpipec(&["verify", "tests/verify/lm.mpipe", flag, "0", "--python", "/nonexistent/python"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("invalid value '0' for '{name}': it must be at least 1")), "{err}");
        assert!(!err.contains("cluster.pp") && !err.contains("ok:"), "{err}");
    }
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    stdout(o).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Python's `CompileError` prints the `rendered` texts of a JSON run: together they must be what
/// the human format prints, the summary and problems outside any file included.
#[test]
fn json_rendered_texts_make_the_human_output() {
    for args in [&["check", "tests/ui/algebra/arity.mpipe"][..], &["check", "no/such/plan.mpipe"]] {
        let human = mpipec(&[&["--color", "never"], args].concat());
        let json = mpipec(&[&["--message-format", "json"], args].concat());
        let rendered: String = json_lines(&json).iter().filter_map(|l| l["rendered"].as_str()).collect();
        assert_eq!(rendered, stderr(&human), "{args:?}");
    }
}

/// `sim --json --ir` is report.json and plan.json in one line, exactly as `build` writes them.
#[test]
fn sim_ir_gives_the_report_and_the_plan_in_one_run() {
    let dir = temp_dir("sim-ir");
    let o = mpipec(&["build", "examples/paper_small.mpipe", "-o", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = mpipec(&["--message-format", "json", "sim", "examples/paper_small.mpipe", "--json", "--ir"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = json_lines(&o);
    let (both, reports) = lines.split_last().unwrap();
    assert_eq!(reports.last().unwrap()["type"], "summary");
    let file =
        |name: &str| serde_json::from_slice::<serde_json::Value>(&std::fs::read(dir.join(name)).unwrap()).unwrap();
    assert_eq!(both["report"], file("report.json"));
    assert_eq!(both["ir"], file("plan.json"));
    std::fs::remove_dir_all(&dir).unwrap();
    let o = mpipec(&["sim", "examples/paper_small.mpipe", "--ir"]);
    assert_eq!(o.status.code(), Some(2), "--ir needs --json");
}

/// `sim --samples N --compare` runs every baseline of `--compare` on the same drawn batches,
/// each as one static schedule; the plan's own rows (static and adaptive) are what `--samples`
/// alone reports.
#[test]
fn sim_samples_report_every_baseline_on_the_same_batches() {
    let plan = "examples/vlm_zero_bubble.mpipe";
    let run = |extra: &[&str]| -> serde_json::Value {
        let o = mpipec(&[&["sim", plan, "--json", "--samples", "6", "--seed", "3"], extra].concat());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    };
    let alone = run(&[]);
    let both = run(&["--compare"]);
    let names: Vec<&str> = both["compare"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    let sampled: Vec<&str> =
        both["samples"]["compare"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(sampled, names);
    assert!(alone["samples"].get("compare").is_none());
    for key in ["samples", "mean_s", "p50_s", "p95_s", "max_s"] {
        assert_eq!(alone["samples"][key], both["samples"][key], "{key}");
    }
    for b in both["samples"]["compare"].as_array().unwrap() {
        let at = |k: &str| b[k].as_f64().unwrap();
        assert!(at("p50_s") <= at("p95_s") && at("p95_s") <= at("max_s") && b["samples"] == 6, "{b}");
    }
    assert!(both["samples"]["derive_s"].as_f64().unwrap() > 0.0);
    // Adaptive keeps the faster of its own and the static schedule on every batch.
    let adaptive = &both["samples"]["adaptive"];
    assert!(adaptive["mean_s"].as_f64().unwrap() <= both["samples"]["mean_s"].as_f64().unwrap(), "{adaptive}");
    assert!(adaptive["max_s"].as_f64().unwrap() <= both["samples"]["max_s"].as_f64().unwrap(), "{adaptive}");
    assert!(both["samples"]["adaptive_derive_s"].as_f64().unwrap() > 0.0);
    let table = stdout(&mpipec(&["sim", plan, "--samples", "4", "--compare"]));
    for name in names {
        assert!(table.lines().any(|l| l.trim_start().starts_with(name) && l.ends_with('x')), "{name}: {table}");
    }
    assert!(table.contains("deriving a plan for one batch takes"), "{table}");
    assert!(table.lines().any(|l| l.trim_start().starts_with("this plan, adaptive") && l.ends_with('x')), "{table}");
}

/// A plan path of `-` reads standard input: the same plan as from its file, diagnostics naming
/// `<stdin>`, and `use "…"` paths resolved against the working directory.
#[test]
fn a_plan_on_standard_input() {
    use std::io::Write;
    let piped = |text: &[u8], args: &[&str]| {
        let mut child = command(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text).unwrap();
        child.wait_with_output().unwrap()
    };
    let text = std::fs::read("examples/paper_small.mpipe").unwrap();
    let from_file = mpipec(&["sim", "examples/paper_small.mpipe", "--json"]);
    let from_stdin = piped(&text, &["sim", "-", "--json"]);
    assert_eq!(from_stdin.status.code(), Some(0), "{}", stderr(&from_stdin));
    assert_eq!(stdout(&from_stdin), stdout(&from_file));
    let o = piped(b"use \"examples/missing.mpipe\";\n", &["--color", "never", "check", "-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("┌─ <stdin>:1:"), "{}", stderr(&o));
    assert!(stderr(&o).contains("examples/missing.mpipe"), "{}", stderr(&o));
}

/// `mpipec adapt`: the plan built once, then a JSON line per batch; a batch whose own plan is
/// faster gets its plan.json with the static plan's stages, a bad request an error line (and
/// the server goes on), and a plan that is not adaptive is refused before any line.
#[test]
fn adapt_answers_a_line_per_batch_and_refuses_a_static_plan() {
    use std::io::Write;
    let sets = ["--set", "owner=adaptive", "--set", "cluster.pp=2", "--set", "cluster.devices=2"];
    let mut child = command(&[&["adapt", "tests/verify/vlm.mpipe"], &sets[..]].concat())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"[1024, 16384, 4096]\nnot tokens\n[4096]\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4, "{}", stdout(&o));
    assert_eq!(lines[0]["ready"]["microbatches"], 8);
    assert_eq!(lines[1]["runs"], "adaptive", "{}", lines[1]);
    assert!(lines[1]["adaptive_s"].as_f64() < lines[1]["static_s"].as_f64());
    let build = mpipec(&[&["sim", "tests/verify/vlm.mpipe", "--json", "--ir"], &sets[..]].concat());
    let static_ir: serde_json::Value = serde_json::from_str(stdout(&build).trim()).unwrap();
    assert_eq!(lines[1]["plan"]["stages"], static_ir["ir"]["stages"]);
    assert_ne!(lines[1]["plan"]["ranks"], static_ir["ir"]["ranks"]);
    assert!(lines[2]["error"].as_str().unwrap().contains("JSON array"), "{}", lines[2]);
    assert_eq!((&lines[3]["runs"], &lines[3]["plan"]), (&"static".into(), &serde_json::Value::Null), "{}", lines[3]);

    let o = mpipec(&["adapt", "tests/verify/vlm.mpipe"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).is_empty() && stderr(&o).contains("help: write `owner adaptive;`"), "{}", stderr(&o));
}

/// `--profile FILE` names a profile outside the plan's directory (the user named it, so
/// `--allow-outside` is not needed): `sim` simulates with it and lists which costs it measured,
/// warns that it was taken on another device and model (W0005) and lacks kinds (W0006); a
/// truncated one is E0211 naming the file, and nothing is simulated.
#[test]
fn sim_with_a_profile_says_which_costs_it_measured() {
    let dir = std::env::temp_dir().join(format!("mpipec-cli-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let layer = r#"{"forward_s": 0.01, "backward_input_s": 0.01, "backward_weight_s": 0.01, "output_bytes": 640, "grad_bytes": 9000}"#;
    let text = format!(
        r#"{{"format": 1, "date": "2026-12-04T00:00:00Z", "device": {{"type": "cpu", "name": "Test CPU"}}, "versions": {{}},
 "model": {{"source": "miniature", "parts": []}}, "shapes": {{"micro_batch_size": 1, "seq_len": 10}},
 "layers": {{"decoder": {layer}}}, "p2p": {{"alpha_s": 0.001, "beta_bytes_per_s": 1e9}}}}"#
    );
    let file = dir.join("p.json");
    std::fs::write(&file, &text).unwrap();
    let o = mpipec(&["sim", "examples/llm_1f1b.mpipe", "--profile", file.to_str().unwrap(), "--color", "never"]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("costs: measured on cpu `Test CPU`") && out.contains("compute of `decoder`"), "{out}");
    assert!(out.contains("costs: analytic model: compute of `decoder:first`, `decoder:last`"), "{out}");
    assert!(err.contains("warning[W0005]") && err.contains("`Test CPU`"), "{err}");
    assert!(err.contains("warning[W0006]"), "{err}");
    std::fs::write(&file, &text[..text.len() / 3]).unwrap();
    let o = mpipec(&["sim", "examples/llm_1f1b.mpipe", "--profile", file.to_str().unwrap(), "--color", "never"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error[E0211]") && err.contains("p.json") && err.contains("ends early"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
