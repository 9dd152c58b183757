//! The editor support under `editors/` against the compiler.
//!
//! - The keyword lists agree: every keyword of `grammar/mpipe.pest` is a keyword of the
//!   TextMate grammar, of the tree-sitter grammar and of the Vim syntax, and each of them
//!   knows exactly mpipec's skeletons, owner strategies, targets and units.
//! - The editors' sample files are real `.mpipe`: they parse with the pest grammar, and the
//!   tree-sitter corpus agrees with it on which inputs are syntax errors.
//! - The plan snippet expands to a plan that `mpipec check` accepts.
//! - `scripts/test-editors` (the TextMate, tree-sitter and Vim suites) passes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

type Names = BTreeSet<String>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

fn names(list: &[&str]) -> Names {
    list.iter().map(|s| s.to_string()).collect()
}

fn units() -> Names {
    mpipe::units::UNITS.iter().map(|(u, _, _)| u.to_string()).collect()
}

fn files(rel: &str, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(root().join(rel))
        .unwrap_or_else(|e| panic!("listing {rel}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no .{ext} files in {rel}");
    out
}

/// The double-quoted strings in `text`, unescaped.
fn quoted(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => s.extend(chars.next()),
                c => s.push(c),
            }
        }
        out.push(s);
    }
    out
}

// ---- grammar/mpipe.pest ----------------------------------------------------------------------

/// The body of the pest rule `name`, from its `{` to the matching `}`.
fn pest_rule<'a>(pest: &'a str, name: &str) -> &'a str {
    let start = pest
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.strip_prefix(name).is_some_and(|rest| rest.trim_start().starts_with('=')))
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("grammar/mpipe.pest has no rule `{name}`"));
    let body = &pest[start..];
    let open = body.find('{').expect("a pest rule has a body");
    let (mut depth, mut in_string, mut escaped) = (0, false, false);
    for (i, c) in body[open..].char_indices() {
        match (in_string, c) {
            (true, _) if escaped => escaped = false,
            (true, '\\') => escaped = true,
            (true, '"') => in_string = false,
            (true, _) => {}
            (false, '"') => in_string = true,
            (false, '{') => depth += 1,
            (false, '}') => {
                depth -= 1;
                if depth == 0 {
                    return &body[open..open + i + 1];
                }
            }
            _ => {}
        }
    }
    panic!("rule `{name}` is not closed")
}

/// The alternatives of the pest `keyword` rule.
fn pest_keywords() -> Names {
    let keywords: Names = quoted(pest_rule(&read("grammar/mpipe.pest"), "keyword")).into_iter().collect();
    assert!(keywords.len() >= 13 && keywords.contains("use") && keywords.contains("true"), "{keywords:?}");
    keywords
}

/// The statement keywords that the pest `key` rule refuses as field names.
fn pest_key_exclusions() -> Names {
    quoted(pest_rule(&read("grammar/mpipe.pest"), "key")).into_iter().collect()
}

// ---- editors/vscode/syntaxes/mpipe.tmLanguage.json -------------------------------------------

/// The text of capturing group `n` of `regex` (0: the whole regex).
fn regex_group(regex: &str, n: usize) -> Option<&str> {
    if n == 0 {
        return Some(regex);
    }
    let bytes = regex.as_bytes();
    let (mut seen, mut i, mut in_class) = (0, 0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'[' => in_class = true,
            b']' => in_class = false,
            b'(' if !in_class && bytes.get(i + 1) != Some(&b'?') => {
                seen += 1;
                if seen == n {
                    let (mut depth, mut j, mut in_class) = (0, i, false);
                    while j < bytes.len() {
                        match bytes[j] {
                            b'\\' => j += 1,
                            b'[' => in_class = true,
                            b']' => in_class = false,
                            b'(' if !in_class => depth += 1,
                            b')' if !in_class => {
                                depth -= 1;
                                if depth == 0 {
                                    return Some(&regex[i + 1..j]);
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    return None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The words of a regex that is only an alternation of literal words, such as
/// `\b(?:true|false)\b` or `(?<![\w-])(?:torch|mindspeed-mm)(?![\w-])`; empty for any other.
fn regex_words(regex: &str) -> Names {
    let mut r = regex;
    loop {
        let before = r;
        r = r.strip_prefix("\\b").unwrap_or(r);
        r = r.strip_suffix("\\b").unwrap_or(r);
        for look in ["(?<!", "(?<=", "(?=", "(?!"] {
            if r.starts_with(look)
                && let Some(end) = r.find(')')
            {
                r = &r[end + 1..];
            }
            if let Some(at) = r.rfind(look)
                && r.ends_with(')')
                && !r[at..].contains('|')
            {
                r = &r[..at];
            }
        }
        if let Some(inner) = r.strip_prefix("(?:").and_then(|x| x.strip_suffix(')')) {
            r = inner;
        } else if let Some(inner) = r.strip_prefix('(').and_then(|x| x.strip_suffix(')')) {
            r = inner;
        }
        if r == before {
            break;
        }
    }
    let words: Vec<String> = r.split('|').map(|w| w.replace("\\/", "/").replace("\\-", "-")).collect();
    if words.iter().all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "_-/%".contains(c))) {
        words.into_iter().collect()
    } else {
        Names::new()
    }
}

/// (scope, words) for every rule of the grammar: the words that its regex, or one of its
/// regex's groups, matches, and the scope given to them.
fn tm_scoped_words(value: &Value, out: &mut Vec<(String, Names)>) {
    match value {
        Value::Object(map) => {
            for key in ["match", "begin"] {
                let Some(regex) = map.get(key).and_then(Value::as_str) else { continue };
                if let Some(name) = map.get("name").and_then(Value::as_str) {
                    out.push((name.to_string(), regex_words(regex)));
                }
                let captures = if key == "match" { "captures" } else { "beginCaptures" };
                for (group, capture) in map.get(captures).and_then(Value::as_object).into_iter().flatten() {
                    let (Ok(n), Some(name)) = (group.parse::<usize>(), capture.get("name").and_then(Value::as_str))
                    else {
                        continue;
                    };
                    if let Some(text) = regex_group(regex, n) {
                        out.push((name.to_string(), regex_words(text)));
                    }
                }
            }
            map.values().for_each(|v| tm_scoped_words(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| tm_scoped_words(v, out)),
        _ => {}
    }
}

fn tm_grammar() -> Value {
    serde_json::from_str(&read("editors/vscode/syntaxes/mpipe.tmLanguage.json")).expect("tmLanguage is JSON")
}

fn tm_words(pred: impl Fn(&str) -> bool) -> Names {
    let mut scoped = Vec::new();
    tm_scoped_words(&tm_grammar(), &mut scoped);
    scoped.into_iter().filter(|(scope, _)| pred(scope)).flat_map(|(_, words)| words).collect()
}

// ---- editors/vim/syntax/mpipe.vim ------------------------------------------------------------

/// Words of `syn keyword GROUP …` lines, per group.
fn vim_keywords(vim: &str, group: Option<&str>) -> Names {
    let mut out = Names::new();
    for line in vim.lines() {
        let mut tokens = line.split_whitespace();
        if !matches!(tokens.next(), Some("syn" | "syntax")) || tokens.next() != Some("keyword") {
            continue;
        }
        let Some(g) = tokens.next() else { continue };
        if group.is_some_and(|want| want != g) || (group.is_none() && g.ends_with("Todo")) {
            continue;
        }
        let options = ["contained", "transparent", "skipwhite", "skipnl", "skipempty", "conceal", "display"];
        out.extend(tokens.filter(|t| !t.contains('=') && !options.contains(t)).map(String::from));
    }
    out
}

/// The alternatives of the first `\%(…\|…\)` in the pattern of `syn match GROUP /…/`.
fn vim_match_alternatives(vim: &str, group: &str) -> Names {
    let line = vim
        .lines()
        .find(|l| {
            let mut t = l.split_whitespace();
            matches!(t.next(), Some("syn" | "syntax")) && t.next() == Some("match") && t.next() == Some(group)
        })
        .unwrap_or_else(|| panic!("syntax/mpipe.vim has no `syn match {group}`"));
    let start = line.find("\\%(").unwrap_or_else(|| panic!("`{group}` has no \\%( group")) + 3;
    let end = start + line[start..].find("\\)").expect("the group closes");
    line[start..end].split("\\|").map(|w| w.replace("\\/", "/")).collect()
}

// ---- the keyword lists -----------------------------------------------------------------------

#[test]
fn pest_keywords_are_keywords_of_every_editor_grammar() {
    let keywords = pest_keywords();

    let tm = tm_words(|scope| scope.starts_with("keyword.") || scope.starts_with("constant.language."));
    let missing: Names = keywords.difference(&tm).cloned().collect();
    assert!(missing.is_empty(), "keywords missing from the TextMate grammar: {missing:?}");

    let grammar_js = read("editors/tree-sitter-mpipe/grammar.js");
    let list = |name: &str| -> Names {
        let start = grammar_js.find(&format!("const {name} = [")).unwrap_or_else(|| panic!("grammar.js has no {name}"));
        let end = start + grammar_js[start..].find("];").expect("the list closes");
        grammar_js[start..end].split('\'').skip(1).step_by(2).map(String::from).collect()
    };
    assert_eq!(list("KEYWORDS"), keywords, "grammar.js KEYWORDS (reserved everywhere) vs pest `keyword`");
    assert_eq!(list("KEY_RESERVED"), pest_key_exclusions(), "grammar.js KEY_RESERVED vs pest `key`");
    for keyword in &keywords {
        assert!(grammar_js.contains(&format!("'{keyword}'")), "grammar.js never uses '{keyword}'");
    }

    let vim = read("editors/vim/syntax/mpipe.vim");
    let missing: Names = keywords.difference(&vim_keywords(&vim, None)).cloned().collect();
    assert!(missing.is_empty(), "keywords missing from the Vim syntax: {missing:?}");
}

#[test]
fn editor_grammars_know_exactly_mpipecs_names() {
    let tables = [
        (
            "skeletons",
            names(&mpipe::algebra::skeleton::names().collect::<Vec<_>>()),
            "support.function.skeleton.mpipe",
            "mpipeSkeleton",
        ),
        ("owners", names(mpipe::algebra::owner::STRATEGIES), "support.constant.owner.mpipe", "mpipeOwner"),
        ("targets", names(mpipe::plan::Target::NAMES), "support.constant.target.mpipe", "mpipeTarget"),
        ("units", units(), "keyword.other.unit.mpipe", "mpipeUnit"),
    ];
    let vim = read("editors/vim/syntax/mpipe.vim");
    let highlights = read("editors/tree-sitter-mpipe/queries/highlights.scm");
    let predicate_lists = |predicate: &str| -> Vec<Names> {
        highlights
            .split(&format!("(#{predicate} "))
            .skip(1)
            .map(|rest| quoted(&rest[..rest.find(')').expect("a predicate closes")]).into_iter().collect())
            .collect()
    };
    let any_of = predicate_lists("any-of?");
    let not_any_of = predicate_lists("not-any-of?");

    for (what, table, scope, vim_group) in &tables {
        assert_eq!(&tm_words(|s| s == *scope), table, "TextMate `{scope}` vs mpipec's {what}");
        let in_vim = if *vim_group == "mpipeSkeleton" || *vim_group == "mpipeOwner" {
            vim_keywords(&vim, Some(vim_group))
        } else {
            vim_match_alternatives(&vim, vim_group)
        };
        assert_eq!(&in_vim, table, "Vim `{vim_group}` vs mpipec's {what}");
        assert!(any_of.contains(table), "highlights.scm has no `#any-of?` list of mpipec's {what}: {any_of:?}");
        assert!(not_any_of.contains(table), "highlights.scm has no `#not-any-of?` list of mpipec's {what}");
    }
    for list in any_of.iter().chain(&not_any_of) {
        assert!(tables.iter().any(|(_, t, _, _)| t == list), "highlights.scm lists names mpipec lacks: {list:?}");
    }
}

#[test]
fn every_textmate_scope_is_asserted_by_a_test() {
    fn scopes(value: &Value, out: &mut Names) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("name" | "contentName", Value::String(s)) if s.ends_with(".mpipe") => {
                            out.insert(s.clone());
                        }
                        _ => scopes(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| scopes(v, out)),
            _ => {}
        }
    }
    let mut defined = Names::new();
    scopes(&tm_grammar(), &mut defined);
    let asserted: Names = files("editors/vscode/tests", "mpipe")
        .iter()
        .flat_map(|p| fs::read_to_string(p).unwrap().lines().map(String::from).collect::<Vec<_>>())
        .filter(|l| l.trim_start().starts_with("//") && (l.contains('^') || l.contains("<-")))
        .flat_map(|l| l.split_whitespace().filter(|t| t.ends_with(".mpipe")).map(String::from).collect::<Vec<_>>())
        .collect();
    for scope in &defined {
        // `keyword.declaration.$1.mpipe` names the matched keyword
        let found = match scope.split_once("$1") {
            Some((head, tail)) => asserted.iter().any(|a| a.starts_with(head) && a.ends_with(tail)),
            None => asserted.contains(scope),
        };
        assert!(found, "no test under editors/vscode/tests asserts `{scope}`");
    }
}

// ---- the samples are real .mpipe -------------------------------------------------------------

fn pest_parses(text: &str) -> Result<(), String> {
    mpipe::parse::parse(mpipe::span::FileId(0), text).map(|_| ()).map_err(|e| format!("{e:?}"))
}

/// Every sample parses, but a `recovery.mpipe`, which shows how a grammar recovers from
/// mistakes and so must really be wrong.
#[test]
fn editor_samples_parse_with_the_pest_grammar() {
    let mut samples = files("editors/vscode/tests", "mpipe");
    samples.extend(files("editors/vim/test", "mpipe"));
    samples.extend(files("editors/tree-sitter-mpipe/test/highlight", "mpipe"));
    let mut recovery = 0;
    for path in samples {
        let text = fs::read_to_string(&path).unwrap();
        let invalid = path.file_stem().is_some_and(|s| s == "recovery");
        recovery += usize::from(invalid);
        match (invalid, pest_parses(&text)) {
            (false, Err(e)) => panic!("{} does not parse: {e}", path.display()),
            (true, Ok(())) => panic!("{} parses, but it is meant to hold syntax errors", path.display()),
            _ => {}
        }
    }
    assert_eq!(recovery, 1, "editors/vscode/tests/recovery.mpipe is gone");
}

struct CorpusCase {
    file: PathBuf,
    title: String,
    error: bool,
    source: String,
}

/// The cases of a tree-sitter corpus file: `===` header (title, `:attributes`), source,
/// `---`, expected tree.
fn corpus_cases(path: &Path) -> Vec<CorpusCase> {
    let text = fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let rule = |line: &str, c: char| line.len() >= 3 && line.chars().all(|x| x == c);
    let mut cases = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !rule(lines[i], '=') {
            i += 1;
            continue;
        }
        let header_end = (i + 1..lines.len()).find(|&j| rule(lines[j], '=')).expect("a header closes");
        let header = &lines[i + 1..header_end];
        let source_end = (header_end + 1..lines.len()).find(|&j| rule(lines[j], '-')).expect("a source ends");
        cases.push(CorpusCase {
            file: path.to_path_buf(),
            title: header.iter().filter(|l| !l.starts_with(':')).copied().collect::<Vec<_>>().join(" "),
            error: header.iter().any(|l| l.trim() == ":error"),
            source: lines[header_end + 1..source_end].join("\n"),
        });
        i = source_end + 1;
    }
    cases
}

#[test]
fn tree_sitter_corpus_agrees_with_pest_on_syntax_errors() {
    let cases: Vec<CorpusCase> =
        files("editors/tree-sitter-mpipe/test/corpus", "txt").iter().flat_map(|p| corpus_cases(p)).collect();
    assert!(cases.len() >= 20, "only {} corpus cases", cases.len());
    assert!(cases.iter().any(|c| c.error), "the corpus has no `:error` case");
    for case in &cases {
        match (case.error, pest_parses(&case.source)) {
            (false, Err(e)) => {
                panic!("{}: `{}` parses with tree-sitter but not with pest: {e}", case.file.display(), case.title)
            }
            (true, Ok(())) => {
                panic!("{}: `{}` is an error for tree-sitter but pest parses it", case.file.display(), case.title)
            }
            _ => {}
        }
    }
}

// ---- snippets --------------------------------------------------------------------------------

/// A VS Code snippet body with every placeholder at its default: `${1:x}` and `${1|x,y|}`
/// give `x`, a later `${1}` repeats it, `$0` is dropped, tabs become four spaces.
fn expand_snippet(body: &[Value]) -> String {
    let text = body.iter().map(|l| l.as_str().expect("a snippet line is a string")).collect::<Vec<_>>().join("\n");
    let mut values = std::collections::HashMap::new();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(inner) = rest.strip_prefix('{') {
            let end = inner.find('}').expect("a placeholder closes");
            let placeholder = &inner[..end];
            rest = &inner[end + 1..];
            let digits: String = placeholder.chars().take_while(char::is_ascii_digit).collect();
            let default = match placeholder[digits.len()..].chars().next() {
                Some(':') => placeholder[digits.len() + 1..].to_string(),
                Some('|') => placeholder[digits.len() + 1..].split([',', '|']).next().unwrap().to_string(),
                _ => values.get(&digits).cloned().unwrap_or_default(),
            };
            values.entry(digits).or_insert_with(|| default.clone());
            out.push_str(&default);
        } else {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            rest = &rest[digits.len()..];
            out.push_str(values.get(&digits).map(String::as_str).unwrap_or(""));
        }
    }
    out.push_str(rest);
    out.replace('\t', "    ")
}

#[test]
fn snippets_expand_to_valid_mpipe() {
    let snippets: Value = serde_json::from_str(&read("editors/vscode/snippets/mpipe.json")).expect("snippets are JSON");
    let snippets = snippets.as_object().expect("an object of snippets");
    for wanted in ["Plan", "Model", "Cluster", "Batch"] {
        assert!(snippets.contains_key(wanted), "no `{wanted}` snippet");
    }
    for (name, snippet) in snippets {
        let text = expand_snippet(snippet["body"].as_array().expect("a body of lines"));
        if let Err(e) = pest_parses(&text) {
            panic!("snippet `{name}` expands to text that does not parse: {e}\n{text}");
        }
    }

    // The whole plan checks, with the standard library it imports from.
    let plan = expand_snippet(snippets["Plan"]["body"].as_array().unwrap());
    let dir = std::env::temp_dir().join(format!("mpipec-editors-snippet-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plan.mpipe");
    fs::write(&file, &plan).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .args(["--color", "never", "check"])
        .arg(&file)
        .output()
        .expect("mpipec runs");
    fs::remove_dir_all(&dir).ok();
    assert!(
        output.status.success(),
        "the Plan snippet does not check:\n{plan}\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// ---- the editor suites -----------------------------------------------------------------------

#[test]
fn editor_test_suites_pass() {
    let output = Command::new("bash")
        .arg(root().join("scripts/test-editors"))
        .current_dir(root())
        .output()
        .expect("bash runs scripts/test-editors");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "scripts/test-editors failed ({}):\n{stdout}\n{stderr}", output.status);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed"), "unexpected summary: {last}");
}
