//! Every code's long explanation: the format of RFC 1567, an erroneous example that really
//! yields that code, and a fixed example that checks clean.

use mpipe::diagnostics::Code;
use mpipe::resolve::loader::MemoryLoader;

struct Block {
    tags: Vec<String>,
    body: String,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let mut body = String::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        out.push(Block { tags: info.split(',').map(|t| t.trim().to_string()).collect(), body });
    }
    out
}

fn tag<'a>(b: &'a Block, prefix: &str) -> Option<&'a str> {
    b.tags.iter().find_map(|t| t.strip_prefix(prefix))
}

/// `\xHH` escapes to bytes, for the example of a file that is not UTF-8.
fn unescape(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && bytes.get(i + 1) == Some(&b'x')
            && i + 4 <= bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 2..i + 4], 16)
        {
            out.push(b);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

fn example_bytes(b: &Block) -> Vec<u8> {
    let mut bytes = if b.tags.iter().any(|t| t == "bytes") { unescape(&b.body) } else { b.body.clone().into_bytes() };
    if let Some(n) = tag(b, "repeat=").and_then(|n| n.parse::<usize>().ok()) {
        while bytes.len() < n {
            bytes.extend_from_slice(b"// padding padding padding padding padding padding padding padding\n");
        }
    }
    bytes
}

/// `// set: KEY=VALUE` lines stand for `--set` flags, as in tests/ui.
fn overrides(bytes: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.strip_prefix("// set: "))
        .filter_map(|kv| mpipe::overrides::split(kv).map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

#[test]
fn every_code_explains_itself_with_examples_that_work() {
    for code in Code::ALL {
        let text = code.explain();
        let name = code.as_str();
        let first = text.lines().next().unwrap_or("");
        assert!(first.starts_with(&format!("# {name}: ")), "{name}: first line must be `# {name}: summary`");
        let summary = code.summary();
        assert!(!summary.is_empty() && !summary.ends_with('.'), "{name}: summary {summary:?}");
        assert!(!summary.starts_with(|c: char| c.is_uppercase()), "{name}: summary starts lowercase: {summary:?}");
        assert!(text.contains("Erroneous code example:"), "{name}: no erroneous example");
        let blocks = blocks(text);
        let mut loader = MemoryLoader::new();
        for b in &blocks {
            if let Some(file) = tag(b, "file=") {
                loader.insert(file, &b.body);
            }
        }
        let erroneous: Vec<&Block> = blocks
            .iter()
            .filter(|b| b.tags.first().is_some_and(|t| t == "mpipe") && b.tags.iter().any(|t| t == name))
            .collect();
        assert_eq!(erroneous.len(), 1, "{name}: exactly one ```mpipe,{name} block");
        let bytes = example_bytes(erroneous[0]);
        let set = overrides(&bytes);
        let checked = mpipe::driver::load("example.mpipe", "example.mpipe", bytes, &loader).check(&loader, &set);
        let codes: Vec<Code> = mpipe::diagnose(&checked, mpipe::Depth::Build).iter().map(|d| d.code).collect();
        assert!(codes.contains(code), "{name}: the erroneous example gives {codes:?}");
        let fixed: Vec<&Block> = blocks.iter().filter(|b| b.tags.iter().any(|t| t == "fixed")).collect();
        assert_eq!(fixed.len(), 1, "{name}: exactly one ```mpipe,fixed block");
        let checked = mpipe::driver::compile("example.mpipe", "example.mpipe", example_bytes(fixed[0]), &loader);
        let left: Vec<&str> = mpipe::diagnose(&checked, mpipe::Depth::Build).iter().map(|d| d.code.as_str()).collect();
        assert!(left.is_empty(), "{name}: the fixed example still gives {left:?}");
    }
}
