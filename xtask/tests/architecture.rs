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
