//! Writes a large session file with rath-persist's writer, for memory measurements of `rath
//! show` (used by `tests/show_memory.rs` and `examples/big_session.rs`).

use std::path::{Path, PathBuf};

use openrath::persist::{Durability, Store, WriterOptions};
use openrath::session::{Chunk, Session, Stamper, ToolCall};

/// Writes one closed session of about `bytes` bytes into the sessions directory `dir` and
/// returns its path and id. Rounds of user / assistant-with-tool-call / tool_result /
/// evidence note / assistant, about 1.6 KB each; deterministic (counter stamper).
pub fn write_big_session(dir: &Path, bytes: u64) -> (PathBuf, String) {
    let root = Session::user_with("Start the long job.", Stamper::counter());
    let store = Store::at(dir);
    let options = WriterOptions::default().durability(Durability::Batched { rows: 4096 });
    let mut w = store.writer(&root, options).expect("writer");
    let filler = "lorem ipsum dolor sit amet ".repeat(12);
    let mut round = 0u64;
    loop {
        let call = format!("call_{round}");
        w.append(&Chunk::assistant(
            Some(format!("step {round}: checking {filler}")),
            Some(vec![ToolCall::function(
                call.clone(),
                "run_shell_command",
                format!("{{\"cmd\": \"wc -l file_{round}.txt\"}}"),
            )]),
        ))
        .expect("append");
        w.append(&Chunk::tool_result(
            call,
            "run_shell_command",
            format!("{round} file_{round}.txt\n{filler}"),
        ))
        .expect("append");
        w.append(&Chunk::note("monitor", format!("round {round} ok")))
            .expect("append");
        w.append(&Chunk::user(format!(
            "continue with {} ({filler})",
            round + 1
        )))
        .expect("append");
        round += 1;
        if round.is_multiple_of(1024) {
            w.flush().expect("flush");
            let len = std::fs::metadata(w.partial_path()).map_or(0, |m| m.len());
            if len >= bytes {
                break;
            }
        }
    }
    let id = w.id().to_string();
    let path = w.close().expect("close");
    (path, id)
}
