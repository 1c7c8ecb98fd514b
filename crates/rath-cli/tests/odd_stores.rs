//! `rath` on odd stores: header ids that look like paths, files named after another id, two
//! files holding one id, an unreadable file, and paging of long transcripts. Outputs are insta
//! snapshots; every path in them is relative.

mod common;

use common::{rath, write_raw_session};

/// `<tmp>/home/sessions` holding the odd files, and a decoy at `<tmp>/home/x.jsonl`, where a
/// path built from the id `../x` would lead.
fn odd_store() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let dir = home.join("sessions");
    std::fs::create_dir_all(&dir).expect("mkdir");
    write_raw_session(&dir, "evil.jsonl", "../x", &[], &["from the evil file"]);
    write_raw_session(&home, "x.jsonl", "../x", &[], &["DECOY outside the store"]);
    write_raw_session(&dir, "renamed.jsonl", "real-id", &[], &["renamed file"]);
    write_raw_session(&dir, "dup.jsonl", "dup", &[], &["the dup.jsonl copy"]);
    write_raw_session(&dir, "copy-of-dup.jsonl", "dup", &[], &["the other copy"]);
    write_raw_session(&dir, "child.jsonl", "child", &["dup"], &["forked from dup"]);
    std::fs::write(dir.join("broken.jsonl"), "not a session\n").expect("write");
    tmp
}

fn on_odd(tmp: &tempfile::TempDir, args: &[&str]) -> String {
    let mut full = vec!["--store", "home"];
    full.extend_from_slice(args);
    rath(tmp.path(), &full)
}

fn stderr_of(out: &str) -> &str {
    out.split("--- stderr\n").nth(1).unwrap_or("")
}

#[test]
fn sessions_lists_header_ids_and_show_finds_every_one() {
    let tmp = odd_store();
    let listing = on_odd(&tmp, &["sessions"]);
    insta::assert_snapshot!("odd_sessions", listing);
    insta::assert_snapshot!("odd_sessions_json", on_odd(&tmp, &["sessions", "--json"]));
    for id in ["../x", "real-id", "dup", "child"] {
        assert!(
            listing.contains(&format!("\n{id} ")),
            "{id} listed:\n{listing}"
        );
        let shown = on_odd(&tmp, &["show", id]);
        assert!(shown.starts_with("exit: 0"), "show {id}:\n{shown}");
        assert!(shown.contains(&format!("session   {id}\n")), "{shown}");
    }
    // The traversal-looking id is found by its header; the decoy outside is never read.
    let evil = on_odd(&tmp, &["show", "../x"]);
    assert!(evil.contains("from the evil file"), "{evil}");
    assert!(!evil.contains("DECOY"), "{evil}");
    insta::assert_snapshot!("odd_show_traversal_id", evil);
    // A file named after nothing in particular: by header id, or by its file name.
    insta::assert_snapshot!("odd_show_by_file_name", on_odd(&tmp, &["show", "renamed"]));
    // Two files hold `dup`: dup.jsonl (its own name) is used, the other is named.
    let dup = on_odd(&tmp, &["show", "dup"]);
    assert!(dup.contains("the dup.jsonl copy") && !dup.contains("the other copy"));
    insta::assert_snapshot!("odd_show_duplicate", dup);
    insta::assert_snapshot!("odd_show_unknown", on_odd(&tmp, &["show", "nope"]));
}

#[test]
fn every_command_reports_the_unreadable_file_the_same_way() {
    let tmp = odd_store();
    let broken = "rath: warning: unreadable file broken.jsonl left out: broken.jsonl:1: invalid record: expected ident at line 1 column 2 (run `rath verify`)\n";
    for args in [
        vec!["sessions"],
        vec!["sessions", "--json"],
        vec!["lineage"],
        vec!["lineage", "--format", "dot"],
        vec!["lineage", "--format", "mermaid"],
        vec!["lineage", "--format", "jsonl"],
        vec!["lineage", "--json"],
        vec!["view", "--out", "v.html"],
        vec!["view", "--out", "v.html", "--json"],
    ] {
        let out = on_odd(&tmp, &args);
        assert!(out.starts_with("exit: 1\n"), "{args:?} exits 1:\n{out}");
        let err = stderr_of(&out);
        assert!(err.contains(broken), "{args:?} warns:\n{err}");
        assert!(
            err.contains("rath: warning: duplicate id in copy-of-dup.jsonl left out: holds session dup, which dup.jsonl also holds; dup.jsonl is used (run `rath verify`)\n"),
            "{args:?}:\n{err}"
        );
        assert_eq!(
            err.lines().count(),
            2,
            "{args:?}: one line per file:\n{err}"
        );
        if args.contains(&"--json") {
            let json = out
                .split("--- stdout\n")
                .nth(1)
                .and_then(|s| s.split("--- stderr\n").next())
                .expect("stdout");
            let v: serde_json::Value = serde_json::from_str(json).expect("json");
            let files: Vec<&str> = v["warnings"]
                .as_array()
                .expect("warnings")
                .iter()
                .filter_map(|w| w["file"].as_str())
                .collect();
            assert_eq!(files, ["broken.jsonl", "copy-of-dup.jsonl"], "{args:?}");
        }
    }
    insta::assert_snapshot!("odd_lineage_json", on_odd(&tmp, &["lineage", "--json"]));
}

#[test]
fn lineage_draws_one_node_per_id() {
    let tmp = odd_store();
    let dot = on_odd(&tmp, &["lineage", "--format", "dot"]);
    assert_eq!(dot.matches("\n  \"dup\" [").count(), 1, "{dot}");
    insta::assert_snapshot!("odd_lineage_dot", dot);
    insta::assert_snapshot!("odd_lineage_tree", on_odd(&tmp, &["lineage"]));
    let mermaid = on_odd(&tmp, &["lineage", "--format", "mermaid"]);
    insta::assert_snapshot!("odd_lineage_mermaid", mermaid);
    let jsonl = on_odd(&tmp, &["lineage", "--format", "jsonl"]);
    assert_eq!(jsonl.matches("{\"id\": \"dup\"").count(), 1, "{jsonl}");
    let view = on_odd(&tmp, &["view", "--out", "v.html"]);
    assert!(view.starts_with("exit: 1"), "{view}");
    let html = std::fs::read_to_string(tmp.path().join("v.html")).expect("page");
    assert_eq!(
        html.matches("<g class=\"node closed\" data-session-id=\"dup\"")
            .count(),
        1
    );
    assert!(
        html.contains("copy-of-dup.jsonl left out"),
        "the page names it"
    );
}

#[test]
fn verify_flags_duplicate_ids_and_mismatched_names() {
    let tmp = odd_store();
    let out = on_odd(&tmp, &["verify"]);
    assert!(out.starts_with("exit: 2"), "{out}");
    insta::assert_snapshot!("odd_verify", out);
}

#[test]
fn show_pages_with_from_and_limit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("home/sessions");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let texts: Vec<String> = (0..30).map(|i| format!("message {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    write_raw_session(&dir, "long.jsonl", "long", &[], &refs);
    let run = |args: &[&str]| {
        let mut full = vec!["--store", "home"];
        full.extend_from_slice(args);
        rath(tmp.path(), &full)
    };
    insta::assert_snapshot!("page_first", run(&["show", "long", "--limit", "3"]));
    insta::assert_snapshot!(
        "page_middle",
        run(&["show", "long", "--from", "10", "--limit", "2"])
    );
    insta::assert_snapshot!("page_past_end", run(&["show", "long", "--from", "99"]));
    insta::assert_snapshot!(
        "page_json",
        run(&["--json", "show", "long", "--from", "28", "--limit", "5"])
    );
    // The whole transcript streamed equals the pages put together.
    let all = run(&["show", "long"]);
    for i in 0..30 {
        assert!(
            all.contains(&format!(" [{i}] user\n      message {i}\n")),
            "{all}"
        );
    }
    assert!(
        !all.contains("shown") && !all.contains("more chunk"),
        "{all}"
    );
    // --json of everything is valid JSON with every chunk.
    let json = run(&["--json", "show", "long"]);
    let body = json
        .split("--- stdout\n")
        .nth(1)
        .and_then(|s| s.split("--- stderr\n").next())
        .expect("stdout");
    let v: serde_json::Value = serde_json::from_str(body).expect("json");
    assert_eq!(v["chunks"].as_array().map(Vec::len), Some(30));
    assert_eq!(v["chunk_count"], 30);

    // The viewer shows the ends of a long transcript and how to print the middle.
    let view = run(&["view", "--out", "v.html", "--transcript-chunks", "4"]);
    assert!(view.starts_with("exit: 0"), "{view}");
    let html = std::fs::read_to_string(tmp.path().join("v.html")).expect("page");
    assert_eq!(
        html.matches("<li class=\"chunk ").count(),
        8,
        "first 4 and last 4"
    );
    assert!(
        html.contains("22 chunk(s) (4 to 25) are not on this page; print them with <code>rath show long --from 4 --limit 22</code>"),
        "{html}"
    );
}
