//! Declared workflows (issue 50, item 2): the shipped examples load; a declared team and
//! the same team written in Rust make byte-identical sessions; every bad file is refused at
//! load with its file and line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rath_declare::{DeclareError, Declared};
use rath_flow::{Agent, FlowContext, Parallel, Sequence, Workflow};
use rath_provider::{Provider, ProviderError, ScriptedProvider, ScriptedResponse};
use rath_session::{Session, Stamper};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows")
}

/// Each agent's script: one text reply naming the agent.
fn scripted(agent: &str) -> Result<Arc<dyn Provider>, ProviderError> {
    Ok(Arc::new(ScriptedProvider::new(vec![
        ScriptedResponse::text(format!("{agent} says so.")).usage(10, 3),
    ])))
}

#[test]
fn the_shipped_examples_load() {
    let declared = Declared::load_dir(examples()).expect("examples/workflows");
    assert_eq!(declared.names(), vec!["coder", "helper", "research"]);
    let coder = declared.get("coder").unwrap();
    assert_eq!(coder.agents["coder"].approve, vec!["write_workspace_file"]);
    let registry = declared.registry(scripted);
    for name in ["coder", "helper", "research"] {
        let def = registry.get(name).expect(name);
        (def.constructor)().expect("builds");
    }
}

/// The sessions a run of `w` records, as their stored JSON, under a deterministic stamper.
async fn run(w: &dyn Workflow) -> Vec<String> {
    let cx = FlowContext::new();
    let question = Session::user_with("Is the Moon drifting away?", Stamper::seeded(7));
    cx.forward(w, question).await.expect("the run");
    cx.journal()
        .sessions()
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect()
}

#[tokio::test]
async fn a_declared_team_and_the_same_team_in_rust_make_the_same_bytes() {
    let declared = Declared::load_dir(examples()).unwrap();
    let from_file = declared.build("research", &scripted).unwrap();
    let agent =
        |name: &str, instructions: &str| Agent::new(name, instructions, scripted(name).unwrap());
    let in_rust = Sequence::new("research")
        .describe("Two researchers in parallel, then a writer.")
        .then(
            Parallel::new("parallel")
                .branch(agent(
                    "facts",
                    "List the facts the question needs, one per line. Do not answer it.",
                ))
                .branch(agent(
                    "doubts",
                    "List what could make a quick answer to the question wrong, one per line.",
                )),
        )
        .then(agent(
            "writer",
            "Answer the question in two sentences, from the facts and doubts above.",
        ));
    let (a, b) = (run(from_file.as_ref()).await, run(&in_rust).await);
    assert!(
        a.len() >= 5,
        "the question, each agent's work, the merge: {}",
        a.len()
    );
    assert_eq!(a, b);
}

/// The one line a bad file is refused with.
fn refused(text: &str) -> String {
    match Declared::parse_str("bad.toml", text) {
        Err(e @ DeclareError::Invalid { .. }) => e.to_string(),
        other => panic!("refused, not {other:?}"),
    }
}

#[test]
fn bad_files_are_refused_with_their_file_and_line() {
    // A syntax error: the array left open on line 3.
    let e = refused("[agents.a]\ninstructions = \"x\"\ntools = [\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("unclosed array"),
        "{e}"
    );
    // An unknown field.
    let e = refused("[agents.a]\ninstructions = \"x\"\ntemperature = 2\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("temperature"),
        "{e}"
    );
    // An unknown tool.
    let e = refused(
        "[agents.a]\ninstructions = \"x\"\ntools = [\n  \"read_workspace_file\",\n  \"launch_rockets\",\n]\n",
    );
    assert!(
        e.starts_with("bad.toml:5: ") && e.contains("unknown tool \"launch_rockets\""),
        "{e}"
    );
    // An approval of a tool the agent does not have.
    let e = refused("[agents.a]\ninstructions = \"x\"\napprove = [\"write_workspace_file\"]\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("not one of its tools"),
        "{e}"
    );
    // A key in the file, as a key or as a value.
    let e = refused("[agents.a]\ninstructions = \"x\"\napi_key = \"abc\"\n");
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("no credentials"),
        "{e}"
    );
    let e = refused(
        "description = \"x\"\n\n[agents.a]\ninstructions = \"sk-proj-0123456789abcdefghij\"\n",
    );
    assert!(
        e.starts_with("bad.toml:4: ") && e.contains("credential-like value"),
        "{e}"
    );
    // A flow naming nothing declared.
    let e = refused(
        "flow = { sequence = [\n  \"a\",\n  \"ghost\",\n] }\n[agents.a]\ninstructions = \"x\"\n",
    );
    assert!(
        e.starts_with("bad.toml:3: ") && e.contains("\"ghost\""),
        "{e}"
    );
    // Two agents and no flow.
    let e = refused("[agents.a]\ninstructions = \"x\"\n[agents.b]\ninstructions = \"y\"\n");
    assert!(e.contains("no flow"), "{e}");
    // A loop without a bound.
    let e =
        refused("flow = { loop = \"a\", until = \"DONE\" }\n[agents.a]\ninstructions = \"x\"\n");
    assert!(e.starts_with("bad.toml:1: ") && e.contains("max"), "{e}");
}

#[test]
fn a_cycle_between_workflows_is_refused() {
    let one = "name = \"one\"\nflow = { sequence = [\"a\", \"two\"] }\n[agents.a]\ninstructions = \"x\"\n";
    let two = "name = \"two\"\n\nflow = { sequence = [\"b\", \"one\"] }\n[agents.b]\ninstructions = \"y\"\n";
    let e = Declared::parse_all(vec![
        ("one.toml".into(), one.into()),
        ("two.toml".into(), two.into()),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("two.toml:3: "), "{e}");
    assert!(e.contains("one -> two -> one"), "{e}");
    // Without the cycle, one workflow uses the other.
    let two = two.replace("\"one\"", "\"b\"");
    let d = Declared::parse_all(vec![
        ("one.toml".into(), one.into()),
        ("two.toml".into(), two),
    ])
    .unwrap();
    assert_eq!(d.names(), vec!["one", "two"]);
}

#[test]
fn a_directory_without_files_or_with_a_duplicate_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Declared::load_dir(dir.path()),
        Err(DeclareError::Io { .. })
    ));
    std::fs::write(
        dir.path().join("a.toml"),
        "name = \"x\"\n[agents.a]\ninstructions = \"x\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.toml"),
        "name = \"x\"\n[agents.b]\ninstructions = \"y\"\n",
    )
    .unwrap();
    let e = Declared::load_dir(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("b.toml:1: ") && e.contains("also declared in"),
        "{e}"
    );
}
