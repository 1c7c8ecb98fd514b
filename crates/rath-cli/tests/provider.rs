//! `rath provider`: the live provider the environment chooses (the rule every example
//! follows, `openrath::select`), its manifest without the key, and one error line for an
//! unknown `RATH_PROVIDER`.

use std::process::{Command, Output};

const KEY: &str = "sk-ant-cli-provider-91c2";

fn rath_provider(env: &[(&str, &str)], json: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rath"));
    cmd.arg("provider");
    if json {
        cmd.arg("--json");
    }
    for var in [
        "RATH_PROVIDER",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run rath provider")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn provider_follows_the_environment_and_never_prints_the_key() {
    let anthropic = [
        ("ANTHROPIC_API_KEY", KEY),
        ("ANTHROPIC_MODEL", "claude-test"),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
    ];
    let out = rath_provider(&anthropic, false);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("live model: anthropic"), "{stdout}");
    assert!(stdout.contains("model: claude-test"), "{stdout}");
    assert!(stdout.contains("host: 127.0.0.1:9"), "{stdout}");
    assert!(stdout.contains("layers: budget, retry"), "{stdout}");
    assert!(!stdout.contains(KEY), "{stdout}");
    let out = rath_provider(&anthropic, true);
    let (json_out, _) = text(&out);
    let v: serde_json::Value = serde_json::from_str(&json_out).expect("JSON");
    assert_eq!(v["provider"]["provider"], "anthropic");
    assert_eq!(v["provider"]["headers"]["x-api-key"], "[redacted]");
    assert!(!json_out.contains(KEY), "{json_out}");
    // With an OpenAI base URL set as well, RATH_PROVIDER decides.
    let mut both = anthropic.to_vec();
    both.push(("OPENAI_BASE_URL", "http://127.0.0.1:8099/v1"));
    let (stdout, _) = text(&rath_provider(&both, false));
    assert!(stdout.contains("live model: openai"), "{stdout}");
    both.push(("RATH_PROVIDER", "anthropic"));
    let (stdout, _) = text(&rath_provider(&both, false));
    assert!(stdout.contains("live model: anthropic"), "{stdout}");
}

#[test]
fn provider_offline_and_unknown() {
    let out = rath_provider(&[], false);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(stdout.starts_with("offline"), "{stdout}");
    let out = rath_provider(&[("RATH_PROVIDER", "bard")], false);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("RATH_PROVIDER must be openai or anthropic"),
        "{stderr}"
    );
    // The chosen provider's missing setting is named.
    let out = rath_provider(
        &[("RATH_PROVIDER", "anthropic"), ("ANTHROPIC_API_KEY", KEY)],
        false,
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("ANTHROPIC_MODEL"), "{stderr}");
    assert!(!stderr.contains(KEY));
}
