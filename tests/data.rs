//! `mpipec data stats`: a dataset written here (tiny PNG and JPEG headers made in code), its
//! histogram read back by a plan, and each kind of bad input named by file and line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use mpipe::data::image::fixtures;

fn mpipec(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(args)
        .current_dir(common::root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mpipec-data-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A conversation line naming `images`, with an `<image>` for each.
fn line(images: &[&str], question: &str) -> String {
    let placeholders = "<image>\\n".repeat(images.len());
    let names: Vec<String> = images.iter().map(|i| format!("\"{i}\"")).collect();
    format!(
        r#"{{"id": "x", "images": [{}], "conversations": [{{"from": "human", "value": "{placeholders}{question}"}}, {{"from": "gpt", "value": "An answer."}}]}}"#,
        names.join(", ")
    )
}

/// A JPEG whose metadata runs past the first 64 KiB that are read for a header: its size is
/// found only in the whole file.
fn large_jpeg(w: u16, h: u16) -> Vec<u8> {
    let mut bytes = fixtures::jpeg(w, h, 60_000);
    let app1 = [[0xFF, 0xE1].as_slice(), &10_002u16.to_be_bytes(), &[0u8; 10_000]].concat();
    bytes.splice(2..2, app1);
    bytes
}

fn dataset(dir: &Path, lines: &[String]) -> PathBuf {
    std::fs::write(dir.join("photo.png"), fixtures::png(640, 480)).unwrap();
    std::fs::write(dir.join("wide.jpg"), large_jpeg(1920, 1080)).unwrap();
    let path = dir.join("data.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn the_histogram_is_what_a_plan_reads() {
    let dir = temp_dir("histogram");
    let data = dataset(
        &dir,
        &[
            line(&["photo.png"], "What is this?"),
            line(&["wide.jpg"], "And this?"),
            line(&[], "No image here."),
            line(&["photo.png"], "Again?"),
        ],
    );
    let hist = dir.join("tokens.csv");
    let o =
        mpipec(&["data", "stats", data.to_str().unwrap(), "--processor", "qwen2_5_vl", "-o", hist.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // Qwen2.5-VL: 640x480 is 1564 patches, 1920x1080 is 10764 (processor.rs's tests).
    assert_eq!(std::fs::read_to_string(&hist).unwrap(), "tokens,weight\n0,1\n1564,2\n10764,1\n");
    let svg = std::fs::read_to_string(dir.join("tokens.svg")).unwrap();
    assert_eq!(svg.matches("<rect x=").count(), 3, "a bar per token count");
    let out = text(&o.stdout);
    assert!(out.contains("4 samples, 3 images (qwen2_5_vl)") && out.contains("4 microbatches, 3 distinct"), "{out}");

    let plan = std::fs::read_to_string(common::root().join("examples/paper_small.mpipe"))
        .unwrap()
        .replace("batch {", "batch {\n    image_histogram = \"tokens.csv\";");
    std::fs::write(dir.join("plan.mpipe"), plan).unwrap();
    let o = mpipec(&["sim", dir.join("plan.mpipe").to_str().unwrap(), "--json", "--samples", "4"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["samples"]["samples"], 4);

    // Two samples a microbatch: two microbatches, each the mean of its pair rounded up.
    let o = mpipec(&["data", "stats", data.to_str().unwrap(), "--processor", "internvl", "--micro-batch-size", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("2 microbatches"), "{}", text(&o.stdout));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn each_bad_line_is_named_by_file_and_line_and_nothing_is_written() {
    let dir = temp_dir("bad");
    std::fs::write(dir.join("broken.png"), b"\x89PNG\r\n\x1a\n\0\0\0\x0dIDAT....").unwrap();
    let data = dataset(
        &dir,
        &[
            line(&["photo.png"], "Fine."),
            r#"{"image": "photo.png", "conversations": [{"from": "human", "value": "<image> <image> two?"}]}"#.into(),
            line(&["broken.png"], "Unreadable header."),
            line(&["nowhere.png"], "Missing file."),
            line(&["wide.jpg"], "Too long for the sequence."),
            "{\"conversations\": [".into(),
        ],
    );
    let hist = dir.join("tokens.csv");
    let d = data.to_str().unwrap();
    let o =
        mpipec(&["data", "stats", d, "--processor", "qwen2_5_vl", "--seq-len", "2048", "-o", hist.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    for (line, what) in [
        (2, "its text refers to 2 images (`<image>`) but the line names 1 image"),
        (3, "broken.png` has no size we can read: a malformed header: the first PNG chunk is not IHDR"),
        (4, "nowhere.png` cannot be read:"),
        (5, "the sample is at least 2698 tokens (2691 for its images, 7 words of text), more than --seq-len 2048"),
        (6, "not JSON (EOF while parsing a list at line 1 column 19)"),
    ] {
        let at = format!("error: {d}:{line}: ");
        assert!(err.lines().any(|l| l.starts_with(&at) && l.contains(what)), "line {line}: {what}\n{err}");
    }
    assert!(!err.contains(&format!("{d}:1:")), "{err}");
    assert!(!hist.exists() && !dir.join("tokens.svg").exists());

    std::fs::write(&data, "\n\n").unwrap();
    let o = mpipec(&["data", "stats", d, "--processor", "llava"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).starts_with(&format!("error: {d}: no samples\n")), "{}", text(&o.stderr));
    let o = mpipec(&["data", "stats", "no/such/data.jsonl", "--processor", "llava"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
