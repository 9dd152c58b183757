//! Data flows one way through the library: parse → resolve → check → derive → ir → sim → backend,
//! with `explore` and the crate's front door above and the shared vocabulary (spans, errors,
//! diagnostics, the algebra, units, costs) below. A top-level module depends on another when its
//! code names it, in a `use crate::…` line or a `crate::x::…` path anywhere (`super::` chains
//! that climb to the crate root count too; comments and string literals do not). Those
//! dependencies form no cycle: a cycle is a pass reaching back into one that runs before it.
//! Beyond no cycle, they point down the layers ARCHITECTURE.md names (`LAYERS`).
//! The binary (`main.rs`, `cli/`) sits on top of the library and is not scanned.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The crate root, `lib.rs`: its own items (the front door) are a node like any module.
const ROOT: &str = "lib";

/// One dependency and the first place that shows it, `file:line`.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

#[test]
fn no_cycle_between_top_level_modules() {
    let graph = dependencies(&library());
    assert!(graph.len() > 10, "the scan found too few modules under src/: {:?}", graph.keys());
    let cycles = cycles(&graph);
    assert!(cycles.is_empty(), "cycles between the library's top-level modules:\n{}", describe(&cycles, &graph));
}

/// The library's layers, bottom up, as ARCHITECTURE.md lists them: a module names modules of
/// its own layer or of those below, never above. A new module takes its place here.
const LAYERS: &[&[&str]] = &[
    &["span", "suggest", "units", "random", "picture", "plot", "algebra", "plan", "profile"],
    &["ast", "diagnostics", "error"],
    &["parse", "resolve", "overrides", "check", "fmt", "edit"],
    &["ir", "cost", "skeletons", "derive", "sim", "catalog"],
    &["built"],
    &["outputs", "backend", "adaptive"],
    &["driver"],
    &[ROOT, "explore", "data", "ide", "fuzzing", "bench"],
];

fn library() -> Vec<(String, String)> {
    let src = common::root().join("src");
    common::files_under(&src, "rs")
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).unwrap();
            (rel, text)
        })
        .filter(|(rel, _)| rel != "main.rs" && !rel.starts_with("cli/"))
        .collect()
}

#[test]
fn dependencies_point_down_the_layers() {
    let graph = dependencies(&library());
    let layer = |module: &str| LAYERS.iter().position(|l| l.contains(&module));
    let unplaced: Vec<&String> = graph.keys().filter(|m| layer(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules with no layer in LAYERS (and ARCHITECTURE.md): {unplaced:?}");
    let upward: Vec<String> = graph
        .iter()
        .flat_map(|(from, edges)| edges.iter().map(move |(to, at)| (from, to, at)))
        .filter(|(from, to, _)| layer(to) > layer(from))
        .map(|(from, to, at)| format!("{from} -> {to} ({at})"))
        .collect();
    assert!(upward.is_empty(), "dependencies that point up a layer:\n{}", upward.join("\n"));
}

/// The longest a function may be, from its `fn` or `def` line to its last line.
const MAX_FUNCTION_LINES: usize = 100;

#[test]
fn no_function_is_longer_than_a_hundred_lines() {
    let root = common::root();
    let mut long = Vec::new();
    for (dir, ext, lengths) in [("src", "rs", rust_functions as fn(&str) -> _), ("python", "py", python_functions)] {
        for path in common::files_under(&root.join(dir), ext) {
            let text = std::fs::read_to_string(&path).unwrap();
            let rel = path.strip_prefix(&root).unwrap().display().to_string();
            for (name, line, lines) in lengths(&text) {
                if lines > MAX_FUNCTION_LINES {
                    long.push(format!("{rel}:{line} {name}: {lines} lines"));
                }
            }
        }
    }
    assert!(long.is_empty(), "functions over {MAX_FUNCTION_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn measures_functions_from_their_first_line_to_their_last() {
    let rust = "fn a() {\n    let s = \"}\";\n    // }\n}\ntrait T { fn b(&self); }\nfn c<F: Fn(u8)>(f: F) -> Vec<fn(u8)> {\n}\n";
    assert_eq!(rust_functions(rust), [("a".to_string(), 1, 4), ("c".to_string(), 6, 2)]);
    let python = "def a(\n    x,\n):\n    if x:\n\n        return 1\n\n\nclass B:\n    def c(self):\n        pass\n";
    assert_eq!(python_functions(python), [("a".to_string(), 1, 6), ("c".to_string(), 10, 2)]);
}

/// Each Rust function with a body: its name, first line and length in lines.
fn rust_functions(text: &str) -> Vec<(String, usize, usize)> {
    let code: Vec<char> = code_only(text).chars().collect();
    let line_at = |i: usize| code[..i].iter().filter(|c| **c == '\n').count() + 1;
    let mut out = Vec::new();
    for i in 0..code.len().saturating_sub(3) {
        let keyword = code[i..i + 3] == ['f', 'n', ' '] && (i == 0 || !is_ident(code[i - 1]));
        let name: String = code[i + 3..].iter().take_while(|c| is_ident(**c)).collect();
        if !keyword || name.is_empty() {
            continue;
        }
        let Some(open) = (i..code.len()).find(|&j| code[j] == '{' || code[j] == ';') else { continue };
        if code[open] == ';' {
            continue;
        }
        let mut depth = 0;
        let close = (open..code.len()).find(|&j| {
            depth += i32::from(code[j] == '{') - i32::from(code[j] == '}');
            depth == 0
        });
        let end = close.unwrap_or(code.len() - 1);
        out.push((name, line_at(i), line_at(end) - line_at(i) + 1));
    }
    out
}

/// Each Python function: its name, first line and length up to its last non-blank line.
fn python_functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start().trim_start_matches("async ");
        let Some(rest) = trimmed.strip_prefix("def ") else { continue };
        let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        // The signature may run over several lines; the body starts after its closing `)`.
        let mut depth = 0i32;
        let signature = (i..lines.len()).find(|&j| {
            depth += lines[j].chars().map(|c| i32::from("([{".contains(c)) - i32::from(")]}".contains(c))).sum::<i32>();
            depth <= 0
        });
        let start = signature.unwrap_or(i) + 1;
        let body = lines[start..].iter().position(|l| !l.trim().is_empty() && indent(l) <= indent(line));
        let after = body.map_or(lines.len(), |n| start + n);
        let last = (i..after).rev().find(|&j| !lines[j].trim().is_empty()).unwrap_or(i);
        out.push((name, i + 1, last - i + 1));
    }
    out
}

#[test]
fn finds_a_cycle_through_uses_paths_and_the_root() {
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub fn front() { a::run(); }\n"),
        ("a/mod.rs", "use crate::{b::Thing, c};\n// crate::c in a comment is no dependency\n"),
        ("b.rs", "fn f() { let s = \"crate::a\"; crate::VERSION; }\n"),
        ("c.rs", "use super::b;\nmod tests {\n    use super::a;\n}\n"),
    ];
    let files: Vec<(String, String)> = files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
    let graph = dependencies(&files);
    assert_eq!(graph["a"].keys().collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(graph["b"].keys().collect::<Vec<_>>(), [ROOT], "a string is no dependency; a root item is");
    assert_eq!(graph["c"].keys().collect::<Vec<_>>(), ["b"], "`super` in c's test module stays in c");
    assert_eq!(graph["b"][ROOT], "src/b.rs:1");
    let cycles = cycles(&graph);
    assert_eq!(cycles, [vec!["a".to_string(), "b".into(), ROOT.into()]]);
    assert!(describe(&cycles, &graph).contains("a -> b -> lib -> a"));
}

/// Every top-level module (and the root) with the modules its code names.
fn dependencies(files: &[(String, String)]) -> Graph {
    let modules: BTreeSet<String> = files.iter().filter_map(|(rel, _)| module_path(rel).into_iter().next()).collect();
    let mut graph = Graph::new();
    for (rel, text) in files {
        let path = module_path(rel);
        let from = path.first().cloned().unwrap_or_else(|| ROOT.to_string());
        let edges = graph.entry(from.clone()).or_default();
        for (line, target) in references(&code_only(text), &path, &modules) {
            if target != from {
                edges.entry(target).or_insert_with(|| format!("src/{rel}:{line}"));
            }
        }
    }
    graph
}

/// `sim/timeline.rs` → `[sim, timeline]`, `sim/mod.rs` → `[sim]`, `lib.rs` → `[]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The top-level modules (or the root, for a root item) that `code` names, with their lines.
fn references(code: &str, path: &[String], modules: &BTreeSet<String>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let target = |name: &str| if modules.contains(name) { name.to_string() } else { ROOT.to_string() };
    for ((i, line), inline) in code.lines().enumerate().zip(inline_depths(code)) {
        for at in path_starts(line, "crate::") {
            let rest = &line[at + "crate::".len()..];
            let names = match rest.strip_prefix('{') {
                Some(group) => group_heads(group),
                None => vec![ident(rest)],
            };
            out.extend(names.into_iter().filter(|n| !n.is_empty()).map(|n| (i + 1, target(n))));
        }
        for at in path_starts(line, "super::") {
            let mut rest = &line[at..];
            let mut climbs = 0;
            while let Some(r) = rest.strip_prefix("super::") {
                (rest, climbs) = (r, climbs + 1);
            }
            if climbs == path.len() + inline && !ident(rest).is_empty() {
                out.push((i + 1, target(ident(rest))));
            }
        }
        if path.is_empty() {
            // The root names its modules without `crate::`.
            let words = line.split(|c: char| !is_ident(c) && c != ':').filter_map(|w| w.split_once("::"));
            out.extend(words.filter(|(head, _)| modules.contains(*head)).map(|(head, _)| (i + 1, head.to_string())));
        }
    }
    out
}

/// Where `prefix` begins a path in `line` rather than ends a longer name (`foo_crate::`).
fn path_starts<'a>(line: &'a str, prefix: &'a str) -> impl Iterator<Item = usize> + 'a {
    line.match_indices(prefix).map(|(at, _)| at).filter(|at| !line[..*at].ends_with(|c: char| is_ident(c) || c == ':'))
}

/// For each line, how many inline `mod name { … }` blocks are open where it starts: a `super::`
/// there climbs out of those first.
fn inline_depths(code: &str) -> Vec<usize> {
    let mut depths = Vec::new();
    let (mut braces, mut open) = (0usize, Vec::new());
    for line in code.lines() {
        depths.push(open.len());
        let inline_mod = line.split_whitespace().collect::<Vec<_>>().windows(3).any(|w| w[0] == "mod" && w[2] == "{");
        for c in line.chars() {
            match c {
                '{' if inline_mod && open.last() != Some(&braces) => {
                    open.push(braces);
                    braces += 1;
                }
                '{' => braces += 1,
                '}' => {
                    braces = braces.saturating_sub(1);
                    if open.last() == Some(&braces) {
                        open.pop();
                    }
                }
                _ => {}
            }
        }
    }
    depths
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn ident(s: &str) -> &str {
    &s[..s.find(|c: char| !is_ident(c)).unwrap_or(s.len())]
}

/// The first name of each path in a `{a::b, c, d::{e, f}}` group, up to its closing brace.
fn group_heads(group: &str) -> Vec<&str> {
    let mut heads = vec![ident(group.trim_start())];
    let mut depth = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => heads.push(ident(group[i + 1..].trim_start())),
            _ => {}
        }
    }
    heads
}

/// `text` with its comments and literals blanked to spaces, line breaks kept.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = chars.iter().map(|c| if *c == '\n' { '\n' } else { ' ' }).collect();
    let mut i = 0;
    while i < chars.len() {
        let after_word = i > 0 && is_ident(chars[i - 1]);
        match literal_or_comment_len(&chars[i..], after_word) {
            0 => {
                out[i] = chars[i];
                i += 1;
            }
            len => i += len,
        }
    }
    out.into_iter().collect()
}

/// The length of the comment or literal `s` starts with; 0 when it starts with code.
fn literal_or_comment_len(s: &[char], after_word: bool) -> usize {
    match s {
        ['/', '/', ..] => s.iter().position(|c| *c == '\n').unwrap_or(s.len()),
        ['/', '*', ..] => block_comment_len(s),
        ['"', ..] => quoted_len(s),
        ['r', '"' | '#', ..] if !after_word => raw_string_len(s),
        ['\'', '\\', _, rest @ ..] => rest.iter().position(|c| *c == '\'').map_or(0, |end| end + 4),
        ['\'', _, '\'', ..] => 3,
        _ => 0,
    }
}

fn block_comment_len(s: &[char]) -> usize {
    let (mut depth, mut i) = (0, 0);
    while i + 1 < s.len() {
        match (s[i], s[i + 1]) {
            ('/', '*') => (depth, i) = (depth + 1, i + 2),
            ('*', '/') if depth == 1 => return i + 2,
            ('*', '/') => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
    }
    s.len()
}

fn quoted_len(s: &[char]) -> usize {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    s.len()
}

/// `r"…"`, `r#"…"#` and so on; 0 for a raw identifier (`r#type`).
fn raw_string_len(s: &[char]) -> usize {
    let hashes = s[1..].iter().take_while(|c| **c == '#').count();
    if s.get(1 + hashes) != Some(&'"') {
        return 0;
    }
    let body = 2 + hashes;
    let closes = |i: &usize| s[*i] == '"' && s[i + 1..].iter().take(hashes).filter(|c| **c == '#').count() == hashes;
    (body..s.len()).find(closes).map_or(s.len(), |end| end + 1 + hashes)
}

/// One shortest cycle through each group of modules that reach one another, from its first
/// module by name.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let reach: BTreeMap<&String, BTreeSet<&String>> = graph.keys().map(|m| (m, reachable(graph, m))).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for m in graph.keys() {
        if seen.contains(m) || !reach[m].contains(m) {
            continue;
        }
        let group: BTreeSet<&String> = reach[m].iter().copied().filter(|n| reach[*n].contains(m)).collect();
        seen.extend(group.iter().copied());
        out.push(shortest_cycle(graph, m, &group));
    }
    out
}

fn reachable<'a>(graph: &'a Graph, from: &String) -> BTreeSet<&'a String> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&String> = graph[from].keys().collect();
    while let Some(m) = stack.pop() {
        if seen.insert(m) {
            stack.extend(graph.get(m).into_iter().flat_map(BTreeMap::keys));
        }
    }
    seen
}

/// Breadth first from `start` back to itself, within `group`.
fn shortest_cycle(graph: &Graph, start: &String, group: &BTreeSet<&String>) -> Vec<String> {
    let mut parent: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(m) = queue.pop_front() {
        for next in graph[m].keys().filter(|n| group.contains(n)) {
            if next == start {
                let mut cycle = vec![m.clone()];
                while let Some(p) = parent.get(cycle.last().unwrap()) {
                    cycle.push((*p).clone());
                }
                cycle.reverse();
                return cycle;
            }
            if !parent.contains_key(next) {
                parent.insert(next, m);
                queue.push_back(next);
            }
        }
    }
    unreachable!("every module of a group reaches the others")
}

/// `a -> b -> a`, and under it where each step is named.
fn describe(cycles: &[Vec<String>], graph: &Graph) -> String {
    let mut out = String::new();
    for cycle in cycles {
        let closed: Vec<&String> = cycle.iter().chain(cycle.first()).collect();
        let names: Vec<&str> = closed.iter().map(|s| s.as_str()).collect();
        out.push_str(&format!("  {}\n", names.join(" -> ")));
        for step in closed.windows(2) {
            out.push_str(&format!("    {} -> {}: {}\n", step[0], step[1], graph[step[0]][step[1]]));
        }
    }
    out
}
