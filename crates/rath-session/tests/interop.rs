//! Every chunk row the Python OpenRath wrote deserialises into our chunk type and serialises
//! back to the same JSON value.

use std::path::PathBuf;

use rath_session::{Chunk, ChunkKind};
use serde_json::Value;

fn store_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/interop/openrath-1.3.0/openrath_home/sessions")
}

#[test]
fn every_interop_chunk_row_round_trips() {
    let dir = store_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 7, "the interop store holds seven sessions");
    let mut rows = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        for line in text.lines() {
            let row: Value = serde_json::from_str(line).expect("valid json");
            if row["record_type"] != "chunk" {
                continue;
            }
            let wire = serde_json::json!({"kind": row["kind"], "payload": row["payload"]});
            let chunk: Chunk = serde_json::from_value(wire.clone())
                .unwrap_or_else(|e| panic!("{}: {line}: {e}", file.display()));
            assert!(chunk.is_conversation());
            kinds.insert(chunk.kind());
            assert_eq!(serde_json::to_value(&chunk).expect("serialise"), wire);
            rows += 1;
        }
    }
    assert_eq!(rows, 18);
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        vec![
            ChunkKind::System,
            ChunkKind::User,
            ChunkKind::Assistant,
            ChunkKind::ToolResult
        ]
    );
}

#[test]
fn assistant_payload_keeps_python_key_order() {
    let c = Chunk::assistant(None, None);
    assert_eq!(
        serde_json::to_string(&c).expect("serialise"),
        r#"{"kind":"assistant","payload":{"content":null,"tool_calls":null}}"#
    );
}
