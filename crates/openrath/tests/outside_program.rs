//! The acceptance test of the facade: a program outside the workspace (the template in
//! `tests/outside/`) that depends on `openrath` (by path), `serde` and `tokio` only builds,
//! runs its typed-tool agent on a scripted model and on an OpenAI-compatible server, and saves
//! the session to a store that loads back.

use std::path::{Path, PathBuf};
use std::process::Command;

use openrath::persist::Store;
use openrath::provider::mock::{MockReply, MockServer};
use openrath::session::ChunkBody;
use serde_json::{Value, json};

/// The target directory this test binary was built in (`target/<profile>/deps/<test>`), so the
/// outside program reuses the workspace's compiled dependencies.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test exe");
    exe.ancestors()
        .nth(3)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Copies the template to `dir`, fills in the `openrath` path and the workspace's lock file
/// (so an offline build resolves the versions already in the registry cache), and builds it.
fn build_outside(dir: &Path) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let template = here.join("tests/outside");
    let manifest = std::fs::read_to_string(template.join("Cargo.toml.in")).expect("template");
    let manifest = manifest.replace("@OPENRATH_PATH@", &here.display().to_string());
    assert!(!manifest.contains('@'), "every placeholder filled");
    std::fs::create_dir_all(dir.join("src")).expect("src");
    std::fs::write(dir.join("Cargo.toml"), &manifest).expect("manifest");
    std::fs::copy(template.join("src/main.rs"), dir.join("src/main.rs")).expect("main.rs");
    std::fs::copy(here.join("../../Cargo.lock"), dir.join("Cargo.lock")).expect("lock");

    // The dependencies a user declares: the facade, serde and tokio, nothing else.
    let deps: Vec<&str> = manifest
        .split("[dependencies]")
        .nth(1)
        .expect("[dependencies]")
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .collect();
    assert_eq!(deps, ["openrath", "serde", "tokio"]);

    let target = target_dir();
    let out = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo build");
    assert!(
        out.status.success(),
        "the outside program did not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = target
        .join("debug")
        .join(format!("outside-agent{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "{} was built", bin.display());
    bin
}

/// Runs the program with `env`, returning its stdout.
fn run(bin: &Path, store: &Path, env: &[(&str, String)]) -> String {
    let mut cmd = Command::new(bin);
    cmd.arg(store);
    for var in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run outside program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the outside program failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The one stored session: its tool result content and final answer.
fn stored(store: &Path) -> (String, Option<String>) {
    let store = Store::at(store);
    let list = store.list().expect("list");
    assert_eq!(list.len(), 1, "one session saved");
    let loaded = store.load(&list[0].id).expect("load");
    let s = loaded.session;
    let tool = s
        .chunks()
        .iter()
        .find_map(|c| match c.body() {
            ChunkBody::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .expect("a tool_result chunk");
    (tool, s.final_text().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread")]
async fn outside_program_runs_scripted_and_openai_compatible() {
    let work = tempfile::tempdir().expect("tmp");
    let bin = build_outside(&work.path().join("outside-agent"));

    // Scripted.
    let scripted = work.path().join("scripted");
    let stdout = run(&bin, &scripted, &[]);
    assert!(stdout.contains("provider: scripted"), "{stdout}");
    assert!(stdout.contains("answer: There are 5 words."), "{stdout}");
    let (tool, answer) = stored(&scripted);
    assert_eq!(tool, r#"{"words": 5}"#);
    assert_eq!(answer.as_deref(), Some("There are 5 words."));

    // OpenAI-compatible: the in-repo mock server speaks the chat-completions wire.
    let server = MockServer::start().await.expect("mock server");
    server.push(MockReply::tool_calls(vec![(
        "call_a",
        "shout",
        json!({"text": "five words"}),
    )]));
    server.push(MockReply::text("FIVE WORDS, shouted.").usage(30, 5));
    let live = work.path().join("live");
    let env = [
        ("OPENAI_BASE_URL", server.base_url()),
        ("OPENAI_API_KEY", "sk-test".to_owned()),
        ("OPENAI_MODEL", "mock-model".to_owned()),
    ];
    let stdout = run(&bin, &live, &env);
    assert!(stdout.contains("provider: openai-compatible"), "{stdout}");
    assert!(stdout.contains("answer: FIVE WORDS, shouted."), "{stdout}");
    let (tool, answer) = stored(&live);
    assert_eq!(tool, r#"{"text": "FIVE WORDS"}"#);
    assert_eq!(answer.as_deref(), Some("FIVE WORDS, shouted."));

    // Both tools' schemas went over the wire, each derived through the facade.
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "two model calls");
    let tools: Vec<&Value> = requests[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .collect();
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["shout", "word_count"],
        "a tool set lists its tools by name"
    );
    for t in tools {
        assert_eq!(
            t["function"]["parameters"]["required"],
            json!(["text"]),
            "{t}"
        );
    }
}
