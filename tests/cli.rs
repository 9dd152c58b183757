//! The real binary: exit codes, streams, colour, message formats, fmt, explain, and the
//! same diagnostics as the library for every fixture.

mod common;

use std::process::{Command, Output};

use mpipe::diagnostics::Code;

fn mpipec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(args)
        .current_dir(common::root())
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
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
        assert_eq!(stderr(&o), "", "{} has diagnostics", path.display());
    }
}

#[test]
fn fixtures_give_the_library_diagnostics() {
    let loader = common::ui_loader();
    let ui = common::root().join("tests/ui");
    for path in common::files_under(&ui, "mpipe") {
        let key = path.strip_prefix(&ui).unwrap().to_string_lossy().into_owned();
        if key.contains("/lib/") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let set = common::overrides(&bytes);
        let lib = mpipe::check_with(&key, &key, bytes, &loader, &set);
        let shown = format!("tests/ui/{key}");
        let mut args = vec!["--message-format".to_string(), "json".to_string(), "check".to_string(), shown.clone()];
        for (k, v) in &set {
            args.push(format!("--set={k}={v}"));
        }
        let o = mpipec(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let lines: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let (summary, diagnostics) = lines.split_last().unwrap();
        assert_eq!(summary["type"], "summary");
        let got: Vec<(String, String, Vec<u64>)> = diagnostics
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
        let want: Vec<(String, String, Vec<u64>)> = lib
            .diagnostics
            .iter()
            .map(|d| {
                (
                    d.code.as_str().to_string(),
                    d.message.replace(&key, &shown),
                    d.labels.iter().flat_map(|l| [l.span.start as u64, l.span.end as u64]).collect(),
                )
            })
            .collect();
        assert_eq!(got, want, "{key}");
        let expected_status = if lib.has_errors() { 1 } else { 0 };
        assert_eq!(o.status.code(), Some(expected_status), "{key}");
    }
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
