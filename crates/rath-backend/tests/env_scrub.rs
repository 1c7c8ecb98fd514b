//! A child never sees the parent's secrets. One test in its own binary, because it sets
//! process environment variables.

mod common;

use std::sync::Arc;

use rath_backend::local::LocalBackend;
use rath_backend::{Backend, CommandPayload, DispatchContext, Output, Payload};
use rath_session::{SandboxSpec, Stamper};

#[tokio::test]
async fn secret_env_vars_do_not_reach_the_child() {
    // SAFETY: this binary has one test and sets the variables before starting any process.
    unsafe {
        std::env::set_var("RATH_TEST_API_KEY", "sk-parent-secret");
        std::env::set_var("GITHUB_TOKEN", "ghp-parent-secret");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "aws-parent-secret");
    }
    let mut backends: Vec<Arc<dyn Backend>> = vec![Arc::new(LocalBackend::new())];
    backends.extend(common::isolated_or_skip("isolated half"));
    for b in backends {
        let st = Stamper::counter();
        let h = b.open(&SandboxSpec::default(), &st).await.unwrap();
        let cx = DispatchContext::new(&st);
        let p = Payload::Command(
            CommandPayload::shell("env; cat /proc/self/environ").env("GIVEN", "yes"),
        );
        let Ok(Output::Command(o)) = b.dispatch(&h, &p, &cx).await else {
            panic!("env failed on {}", b.name());
        };
        assert!(
            !o.stdout.contains("parent-secret"),
            "{}: {}",
            b.name(),
            o.stdout
        );
        assert!(o.stdout.contains("GIVEN=yes"));
        assert!(o.stdout.contains("PATH="));
        let p = Payload::Code(rath_backend::CodePayload::python(
            "import os; print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k))",
        ));
        let Ok(Output::Code(o)) = b.dispatch(&h, &p, &cx).await else {
            panic!("code failed on {}", b.name());
        };
        assert_eq!(o.stdout, "[]\n", "{}", b.name());
    }
}
