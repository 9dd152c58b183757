//! One line of a dataset in the LLaVA conversation format:
//!
//! ```json
//! {"id": "0", "image": "cat.png",
//!  "conversations": [{"from": "human", "value": "<image>\nWhat is this?"},
//!                    {"from": "gpt", "value": "A cat."}]}
//! ```
//!
//! `image` (one path) or `images` (a list) name the sample's images; each `<image>` in the
//! text is where one goes, in order, so a sample has as many `<image>` as images (none in a
//! text-only sample). `from` is `human`, `gpt` or `system`.

use serde_json::Value;

/// The placeholder LLaVA's data writes for an image.
pub const IMAGE: &str = "<image>";

const ROLES: [&str; 3] = ["human", "gpt", "system"];

/// What a line says about its sample's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The image paths, as written (relative to the images folder).
    pub images: Vec<String>,
    /// Whitespace-separated words of its text, `<image>` left out: every tokenizer the
    /// processors go with splits at whitespace first, so each is at least one token.
    pub words: u64,
}

/// The record on `line`, or what is wrong with it.
pub fn record(line: &str) -> Result<Record, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(object) = value else { return Err("not a JSON object".into()) };
    let texts = conversation(object.get("conversations"))?;
    let images = image_names(&object)?;
    let placeholders: usize = texts.iter().map(|t| t.matches(IMAGE).count()).sum();
    if placeholders > images.len() {
        return Err(format!(
            "its text refers to {} (`{IMAGE}`) but the line names {}",
            images_count(placeholders),
            images_count(images.len())
        ));
    }
    if placeholders < images.len() {
        return Err(format!(
            "the line names {} but its text places {placeholders} (`{IMAGE}`); each image needs its `{IMAGE}`",
            images_count(images.len())
        ));
    }
    let words = texts.iter().map(|t| t.replace(IMAGE, " ").split_whitespace().count() as u64).sum();
    Ok(Record { images, words })
}

fn images_count(n: usize) -> String {
    format!("{n} image{}", if n == 1 { "" } else { "s" })
}

/// The `value` of each turn.
fn conversation(turns: Option<&Value>) -> Result<Vec<&str>, String> {
    let Some(Value::Array(turns)) = turns.filter(|t| t.as_array().is_some_and(|a| !a.is_empty())) else {
        return Err("no \"conversations\" list".into());
    };
    turns
        .iter()
        .map(|t| match (t.get("from").and_then(Value::as_str), t.get("value").and_then(Value::as_str)) {
            (Some(from), Some(value)) if ROLES.contains(&from) => Ok(value),
            _ => {
                let shown: String = t.to_string().chars().take(80).collect();
                Err(format!(
                    "a turn must be {{\"from\": \"human\" | \"gpt\" | \"system\", \"value\": TEXT}}, not {shown}"
                ))
            }
        })
        .collect()
}

fn image_names(object: &serde_json::Map<String, Value>) -> Result<Vec<String>, String> {
    let bad = || "\"image\" must be a path and \"images\" a list of paths".to_string();
    match (object.get("image"), object.get("images")) {
        (Some(_), Some(_)) => Err("the line has both \"image\" and \"images\"; name its images in one".into()),
        (Some(one), None) => one.as_str().map(|s| vec![s.to_string()]).ok_or_else(bad),
        (None, Some(Value::Array(list))) => {
            list.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(bad)).collect()
        }
        (None, Some(_)) => Err(bad()),
        (None, None) => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_with_its_images() {
        let r = record(
            r#"{"id": "1", "images": ["a.png", "b.jpg"], "conversations": [
                {"from": "human", "value": "<image>\n<image>\nCompare these two."},
                {"from": "gpt", "value": "The first is larger."}]}"#,
        )
        .unwrap();
        assert_eq!(r, Record { images: vec!["a.png".into(), "b.jpg".into()], words: 7 });
        let text_only = record(r#"{"conversations": [{"from": "human", "value": "Hi"}]}"#).unwrap();
        assert_eq!(text_only, Record { images: Vec::new(), words: 1 });
    }

    #[test]
    fn each_mismatch_says_what_is_wrong() {
        let turn = |v: &str| format!(r#"{{"from": "human", "value": "{v}"}}"#);
        let line = |extra: &str, v: &str| format!(r#"{{{extra}"conversations": [{}]}}"#, turn(v));
        assert_eq!(
            record(&line("", "<image> what is this?")).unwrap_err(),
            "its text refers to 1 image (`<image>`) but the line names 0 images"
        );
        assert!(
            record(&line(r#""image": "a.png", "#, "no placeholder"))
                .unwrap_err()
                .starts_with("the line names 1 image ")
        );
        assert_eq!(record("{not json").unwrap_err(), "not JSON (key must be a string at line 1 column 2)");
        assert_eq!(record("[1]").unwrap_err(), "not a JSON object");
        assert_eq!(record(r#"{"image": "a.png"}"#).unwrap_err(), "no \"conversations\" list");
        assert!(
            record(r#"{"conversations": [{"from": "robot", "value": ""}]}"#).unwrap_err().starts_with("a turn must be")
        );
        assert!(record(&line(r#""images": "a.png", "#, "<image>")).unwrap_err().contains("a list of paths"));
    }
}
