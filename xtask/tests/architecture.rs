//! `docs/ARCHITECTURE.md` names exactly the workspace's crates, each with the layer the
//! layering law in the root `Cargo.toml` (`[workspace.metadata.layers]`) gives it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn manifest(p: &Path) -> toml::Table {
    read(p)
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The crate table of the "Code map" section: rows `| `name` | layer | ... |`.
fn doc_table(text: &str) -> BTreeMap<String, i64> {
    let map = text
        .split("\n## ")
        .find(|s| s.starts_with("Code map"))
        .expect("ARCHITECTURE.md has a `## Code map` section");
    let mut rows = BTreeMap::new();
    for line in map.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let name = cells[0].trim_matches('`').to_owned();
        let layer: i64 = cells
            .get(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no layer number in row: {line}"));
        assert!(
            rows.insert(name.clone(), layer).is_none(),
            "{name} appears twice in the crate table"
        );
    }
    assert!(!rows.is_empty(), "no crate table in the Code map section");
    rows
}

#[test]
fn the_crate_table_names_every_crate_with_its_layer() {
    let root = root();
    let cargo = manifest(&root.join("Cargo.toml"));
    let workspace = cargo["workspace"].as_table().expect("[workspace]");
    let layers: BTreeMap<String, i64> = workspace["metadata"]["layers"]
        .as_table()
        .expect("[workspace.metadata.layers]")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_integer().expect("a layer is an integer")))
        .collect();
    let mut members: Vec<String> = workspace["members"]
        .as_array()
        .expect("workspace members")
        .iter()
        .map(|m| {
            let dir = root.join(m.as_str().expect("a member path"));
            manifest(&dir.join("Cargo.toml"))["package"]["name"]
                .as_str()
                .expect("package name")
                .to_owned()
        })
        .collect();
    members.sort();
    let layered: Vec<String> = layers.keys().cloned().collect();
    assert_eq!(
        layered, members,
        "[workspace.metadata.layers] must name exactly the workspace members"
    );
    let table = doc_table(&read(&root.join("docs/ARCHITECTURE.md")));
    assert_eq!(
        table, layers,
        "docs/ARCHITECTURE.md's crate table must match [workspace.metadata.layers]"
    );
}

#[test]
fn the_table_parser_reads_rows_and_rejects_what_is_not_a_table() {
    let doc = "# A\n\n## Code map\n\n| crate | layer | owns |\n| --- | --- | --- |\n\
               | `a` | 0 | x |\n| `b` | 2 | y |\n\n## Other\n| `c` | 9 | z |\n";
    let t = doc_table(doc);
    assert_eq!(
        t.into_iter().collect::<Vec<_>>(),
        vec![("a".to_owned(), 0), ("b".to_owned(), 2)]
    );
    let twice = "## Code map\n| `a` | 0 | x |\n| `a` | 1 | y |\n";
    assert!(std::panic::catch_unwind(|| doc_table(twice)).is_err());
    let no_layer = "## Code map\n| `a` | zero | x |\n";
    assert!(std::panic::catch_unwind(|| doc_table(no_layer)).is_err());
}

/// The longest a function in rath-flow may be, in lines from its `fn` line to its closing
/// brace (issue 18: "no function over about 60 lines in rath-flow").
const MAX_FN_LINES: usize = 60;

/// `src` with comments, string literals and char literals blanked (newlines kept), so that
/// braces and `fn` are only ever code.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, part: &[u8]| {
        out.extend(part.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, 2);
            while j < rest.len() && depth > 0 {
                if rest[j..].starts_with(b"/*") {
                    (depth, j) = (depth + 1, j + 2);
                } else if rest[j..].starts_with(b"*/") {
                    (depth, j) = (depth - 1, j + 2);
                } else {
                    j += 1;
                }
            }
            j
        } else if let Some(n) = raw_string_len(rest).filter(|_| !ident_before) {
            n
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if rest[0] == b'\'' {
            char_literal_len(rest).unwrap_or(0)
        } else {
            0
        };
        if end == 0 {
            out.push(b[i]);
            i += 1;
        } else {
            blank(&mut out, &rest[..end]);
            i += end;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br"..."`) at the start of `s`.
fn raw_string_len(s: &[u8]) -> Option<usize> {
    let start = if s.starts_with(b"br") {
        2
    } else if s.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = s[start..].iter().take_while(|&&c| c == b'#').count();
    let open = start + hashes;
    if s.get(open) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = &s[open + 1..];
    let at = body
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(open + 1 + at + close.len())
}

/// The length of a char literal (`'x'`, `'\n'`, `'\u{7f}'`) at the start of `s`; `None` for
/// a lifetime.
fn char_literal_len(s: &[u8]) -> Option<usize> {
    if s.get(1) == Some(&b'\\') {
        // `'\n'`, `'\''`, `'\u{7f}'`: the closing quote after the escaped character.
        let close = s.iter().skip(3).take(10).position(|&c| c == b'\'')?;
        return Some(close + 4);
    }
    let ch = std::str::from_utf8(&s[1..s.len().min(5)])
        .ok()
        .or_else(|| std::str::from_utf8(&s[1..s.len().min(4)]).ok())
        .or_else(|| std::str::from_utf8(&s[1..s.len().min(3)]).ok())
        .or_else(|| std::str::from_utf8(&s[1..s.len().min(2)]).ok())?
        .chars()
        .next()?;
    let after = 1 + ch.len_utf8();
    (s.get(after) == Some(&b'\'')).then_some(after + 1)
}

/// Every function with a body in `src`: (name, first line, length in lines).
fn fn_lengths(src: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(src);
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn ") {
        let at = from + found;
        from = at + 3;
        let word_start = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !word_start || name.is_empty() {
            continue;
        }
        // The body opens at the first `{` outside parentheses and brackets; a `;` first
        // means a declaration without one.
        let mut depth = 0i32;
        let mut open = None;
        for (j, &c) in b.iter().enumerate().skip(at + 3) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut level = 0usize;
        let close = b.iter().enumerate().skip(open).find_map(|(j, &c)| {
            match c {
                b'{' => level += 1,
                b'}' => {
                    level -= 1;
                    if level == 0 {
                        return Some(j);
                    }
                }
                _ => {}
            }
            None
        });
        let Some(close) = close else { continue };
        let first = line_of(at);
        out.push((name, first, line_of(close) - first + 1));
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_function_in_rath_flow_is_over_60_lines() {
    let src = root().join("crates/rath-flow/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() >= 10, "rath-flow's sources: {files:?}");
    let mut counted = 0;
    let mut long = Vec::new();
    for f in &files {
        for (name, line, len) in fn_lengths(&read(f)) {
            counted += 1;
            if len > MAX_FN_LINES {
                let rel = f.strip_prefix(root()).unwrap_or(f).display().to_string();
                long.push(format!("{rel}:{line} fn {name}: {len} lines"));
            }
        }
    }
    assert!(
        counted > 100,
        "only {counted} functions found: the counter is broken"
    );
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines in rath-flow:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_counter_sees_through_strings_comments_and_declarations() {
    let src = r##"
/// fn in_a_doc_comment() { {
trait T {
    fn declared(&self) -> [u8; 4];
}
fn one() {
    let s = "} fn fake() {";
    let r = r#"}"#;
    let c = '}';
    let q = '\'';
    let l: &'static str = "x";
    /* } */
}

pub(crate) async fn two<'a>(x: &'a str) -> Result<(), ()>
where
    'a: 'static,
{
    if x.is_empty() {
        return Err(());
    }
    Ok(())
}
"##;
    let got: Vec<(String, usize, usize)> = fn_lengths(src);
    assert_eq!(
        got,
        vec![("one".to_owned(), 6, 8), ("two".to_owned(), 15, 9)]
    );
}

/// The longest a function in a library crate may be, in lines (issue 49: "no function over
/// ~80 lines in the library crates").
const MAX_LIBRARY_FN_LINES: usize = 80;

/// The longest a library source file may be, in lines (issue 49: "no library file over
/// ~1,200 lines").
const MAX_LIBRARY_FILE_LINES: usize = 1200;

/// The source files of the library crates: every workspace member but the binaries' crates
/// (rath-cli, xtask) and the test kit.
fn library_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let crates = std::fs::read_dir(root().join("crates")).expect("crates/");
    for entry in crates {
        let dir = entry.expect("dir entry").path();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if matches!(name, "rath-cli" | "rath-testkit") || !dir.join("src").is_dir() {
            continue;
        }
        rust_files(&dir.join("src"), &mut files);
    }
    files.sort();
    files
}

/// What is still over its length, and how long it is: debt this list records so that it
/// only shrinks. A new function or file over its length fails the test, as does one of
/// these growing; one brought under its length must leave the list. The group-commit SQL
/// of the run store (both databases in one `committer_tx!` body) and of the session
/// stores (the `sql_store!` macro, one file) are what is left.
const STILL_LONG: &[(&str, usize)] = &[
    (
        "crates/rath-runtime/src/store/commit.rs fn apply_as_one",
        140,
    ),
    ("crates/rath-runtime/src/store/commit.rs fn apply", 290),
    ("crates/rath-runtime/src/store/mod.rs fn resolve", 84),
    ("crates/rath-store-sql/src/core.rs", 2364),
    ("crates/rath-store-sql/src/core.rs fn save_new", 118),
    ("crates/rath-store-sql/src/core.rs fn group_set", 369),
];

#[test]
fn no_library_function_or_file_is_over_its_length() {
    let files = library_sources();
    assert!(files.len() > 100, "library sources: {}", files.len());
    let mut over: BTreeMap<String, usize> = BTreeMap::new();
    for f in &files {
        let text = read(f);
        let rel = f.strip_prefix(root()).unwrap_or(f).display().to_string();
        let lines = text.lines().count();
        if lines > MAX_LIBRARY_FILE_LINES {
            over.insert(rel.clone(), lines);
        }
        for (name, _, len) in fn_lengths(&text) {
            if len > MAX_LIBRARY_FN_LINES {
                over.insert(format!("{rel} fn {name}"), len);
            }
        }
    }
    let mut wrong = Vec::new();
    for (what, len) in &over {
        match STILL_LONG.iter().find(|(w, _)| w == what) {
            None => wrong.push(format!("{what}: {len} lines (over the length)")),
            Some((_, was)) if len > was => wrong.push(format!(
                "{what}: {len} lines, longer than the {was} on record"
            )),
            Some(_) => {}
        }
    }
    for (what, _) in STILL_LONG {
        if !over.contains_key(*what) {
            wrong.push(format!(
                "{what}: no longer over its length; take it off STILL_LONG"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "over {MAX_LIBRARY_FN_LINES} lines a function or {MAX_LIBRARY_FILE_LINES} a file:\n{}",
        wrong.join("\n")
    );
}

/// The modules of rath-flow (files of `src/`) and, for each, the other modules its code
/// names (`crate::module::...`, or `crate::{module::...}`); comments and strings are not code.
/// A name re-exported at the crate root (`crate::FlowError`) is followed to the module
/// `lib.rs` takes it from.
fn flow_module_graph() -> BTreeMap<String, Vec<String>> {
    let src = root().join("crates/rath-flow/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let module = |f: &PathBuf| {
        f.file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned()
    };
    let mods: Vec<String> = files.iter().map(module).filter(|m| m != "lib").collect();
    // `pub use module::{A, B}` in lib.rs: which module a root name comes from.
    let lib = code_only(&read(&src.join("lib.rs")));
    let mut root_names: BTreeMap<String, String> = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((m, names)) = rest.split_once("::") else {
            continue;
        };
        if !mods.iter().any(|x| x == m) {
            continue;
        }
        for n in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if n.starts_with(|c: char| c.is_ascii_uppercase()) {
                root_names.insert(n.to_owned(), m.to_owned());
            }
        }
    }
    let mut graph = BTreeMap::new();
    for f in &files {
        let me = module(f);
        if me == "lib" {
            continue;
        }
        let code = code_only(&read(f));
        // Tests inside a file may use anything.
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        let mut deps = std::collections::BTreeSet::new();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let rest_names = rest.trim_start_matches('{');
            let name: String = rest_names
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let target = if mods.contains(&name) {
                Some(name)
            } else {
                root_names.get(&name).cloned()
            };
            if let Some(t) = target.filter(|t| *t != me) {
                deps.insert(t);
            }
        }
        graph.insert(me, deps.into_iter().collect());
    }
    graph
}

/// A circle in `graph`, if there is one (its modules in order).
fn a_circle(graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].to_vec());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for d in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn rath_flow_modules_form_no_circle() {
    let graph = flow_module_graph();
    assert!(graph.len() >= 10, "rath-flow's modules: {graph:?}");
    // The walk sees real edges: the session loop uses the context.
    assert!(graph["session_loop"].contains(&"context".to_owned()));
    if let Some(circle) = a_circle(&graph) {
        panic!("a circle of modules in rath-flow: {}", circle.join(" -> "));
    }
    // The workflow trait knows no concrete workflow: no agent, combinator or layer.
    for concrete in ["agent", "combinators", "layers", "selector", "session_loop"] {
        assert!(
            !graph["workflow"].contains(&concrete.to_owned()),
            "workflow.rs uses {concrete}"
        );
    }
}

#[test]
fn the_circle_finder_finds_a_circle_and_no_false_one() {
    let g = |edges: &[(&str, &str)]| {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (a, b) in edges {
            m.entry((*a).to_owned()).or_default().push((*b).to_owned());
            m.entry((*b).to_owned()).or_default();
        }
        m
    };
    assert_eq!(a_circle(&g(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    assert_eq!(
        a_circle(&g(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()])
    );
}
