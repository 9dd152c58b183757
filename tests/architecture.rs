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
    &["ir", "cost", "derive", "sim", "catalog"],
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
