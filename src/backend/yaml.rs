//! A small YAML writer for the configuration files the backends emit: maps in block style in
//! the order they are built, scalars and lists of numbers in flow style, strings quoted.
//! Enough for MindFormers and HyperParallel configs, and byte-for-byte deterministic.

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A scalar or flow list, already written.
    Flow(String),
    Map(Map),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Map(Vec<(String, Node)>);

impl Map {
    pub fn new() -> Map {
        Map::default()
    }

    pub fn set(mut self, key: &str, value: impl Into<Node>) -> Map {
        self.0.push((key.to_string(), value.into()));
        self
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, indent: usize) {
        for (key, value) in &self.0 {
            out.push_str(&" ".repeat(indent));
            out.push_str(key);
            match value {
                Node::Flow(text) => {
                    out.push_str(": ");
                    out.push_str(text);
                    out.push('\n');
                }
                Node::Map(map) => {
                    out.push_str(":\n");
                    map.write(out, indent + 2);
                }
            }
        }
    }
}

impl From<Map> for Node {
    fn from(map: Map) -> Node {
        Node::Map(map)
    }
}

impl From<u64> for Node {
    fn from(n: u64) -> Node {
        Node::Flow(n.to_string())
    }
}

impl From<i64> for Node {
    fn from(n: i64) -> Node {
        Node::Flow(n.to_string())
    }
}

impl From<bool> for Node {
    fn from(b: bool) -> Node {
        Node::Flow(if b { "true" } else { "false" }.into())
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Node {
        Node::Flow(serde_json::to_string(s).expect("strings serialise"))
    }
}

impl From<String> for Node {
    fn from(s: String) -> Node {
        Node::from(s.as_str())
    }
}

/// The LLM's shape under the Hugging Face config names, which MindFormers' mcore models and
/// HyperParallel's trainer both read.
pub fn hugging_face(map: Map, d: &crate::plan::Decoder, seq_len: u64) -> Map {
    map.set("num_hidden_layers", d.layers)
        .set("hidden_size", d.hidden)
        .set("intermediate_size", d.ffn)
        .set("num_attention_heads", d.attention.heads)
        .set("num_key_value_heads", d.attention.kv_heads)
        .set("vocab_size", d.vocab)
        .set("max_position_embeddings", seq_len)
}

/// `[a, b, c]`.
pub fn list<T: ToString>(items: &[T]) -> Node {
    Node::Flow(flow(items))
}

/// `[[a, b], [c, d]]`.
pub fn nested<T: ToString>(rows: &[Vec<T>]) -> Node {
    Node::Flow(format!("[{}]", rows.iter().map(|r| flow(r)).collect::<Vec<_>>().join(", ")))
}

/// A list of strings.
pub fn strings(items: &[&str]) -> Node {
    let quoted: Vec<String> = items.iter().map(|s| serde_json::to_string(s).expect("strings serialise")).collect();
    Node::Flow(format!("[{}]", quoted.join(", ")))
}

fn flow<T: ToString>(items: &[T]) -> String {
    format!("[{}]", items.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", "))
}

/// A `#` comment block, one line per entry.
pub fn comment(lines: &[String]) -> String {
    lines.iter().map(|l| if l.is_empty() { "#\n".to_string() } else { format!("# {l}\n") }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_nest_in_block_style_and_lists_flow() {
        let text = Map::new()
            .set("parallel", Map::new().set("pipeline_stage", 4u64).set("use_seq_parallel", true))
            .set("offset", nested(&[vec![1i64, -1], vec![0, 0]]))
            .set("name", "a \"b\"")
            .render();
        assert_eq!(
            text,
            "parallel:\n  pipeline_stage: 4\n  use_seq_parallel: true\noffset: [[1, -1], [0, 0]]\nname: \"a \\\"b\\\"\"\n"
        );
    }
}
