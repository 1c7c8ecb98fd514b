//! The provider layers around a provider written here, outside the crate: it implements
//! `Provider` itself, as a user's would, and gets retries, a budget, a rate limit and a
//! fallback by wrapping.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rath_provider::{
    Attempt, Jitter, OpenAiConfig, OpenAiProvider, Provider, ProviderError, ProviderExt,
    ProviderManifest, ProviderRequest, ProviderResponse, RateLimit, Retry, StreamEvent, StreamSink,
};
use rath_session::{Chunk, Session, Stamper, Usage};
use tokio::time::Instant;

/// Virtual time since `t0`: every test here that measures time runs on tokio's paused clock.
fn since(t0: Instant) -> Duration {
    Instant::now() - t0
}

/// A user's provider: answers from a script of texts and errors, counting every call.
struct MyProvider {
    name: String,
    script: Mutex<VecDeque<Result<String, ProviderError>>>,
    calls: AtomicUsize,
}

impl MyProvider {
    fn new(name: &str, script: Vec<Result<&str, ProviderError>>) -> Self {
        Self {
            name: name.to_owned(),
            script: Mutex::new(script.into_iter().map(|r| r.map(str::to_owned)).collect()),
            calls: AtomicUsize::new(0),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn next(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let next = self.script.lock().unwrap().pop_front();
        let text = next.unwrap_or_else(|| Err(ProviderError::Config("script is empty".into())))?;
        Ok(ProviderResponse {
            request_id: req.request_id.clone(),
            chunk: Chunk::assistant(Some(text), None),
            finish_reason: Some("stop".into()),
            usage: Some(Usage::new(20, 5)),
            model: Some("my-model".into()),
            provider: self.name.clone(),
            detail: BTreeMap::new(),
        })
    }
}

#[async_trait]
impl Provider for MyProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(&self, req: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
        self.next(req)
    }

    /// Streams word by word, so a test can see deltas pass through the layers.
    async fn stream(
        &self,
        req: &ProviderRequest,
        sink: &mut StreamSink<'_>,
    ) -> Result<ProviderResponse, ProviderError> {
        let resp = self.next(req)?;
        for word in resp.text().unwrap_or_default().split_inclusive(' ') {
            sink(StreamEvent::TextDelta {
                text: word.to_owned(),
            });
        }
        Ok(resp)
    }

    fn manifest(&self) -> ProviderManifest {
        let mut m = ProviderManifest::new(self.name.clone());
        m.parameters
            .insert("max_tokens".into(), serde_json::json!(10));
        m
    }
}

fn request() -> ProviderRequest {
    let s = Session::user_with("How many words in 'a b c'?", Stamper::counter());
    ProviderRequest::from_session(&s, vec![])
}

fn attempts_of(resp: &ProviderResponse) -> Vec<Attempt> {
    serde_json::from_value(resp.detail["attempts"].clone()).expect("attempts parse")
}

fn fast_retry(seed: u64) -> Retry {
    Retry::default()
        .with_backoff(Duration::from_millis(100), Duration::from_secs(10))
        .with_jitter(Jitter::Seeded(seed))
}

/// A 429 with Retry-After and a 500, then an answer: the retry layer waits as the server
/// said (virtual time), retries the 500 with backoff, and answers; the evidence lists all
/// three attempts.
#[tokio::test(start_paused = true)]
async fn a_user_provider_survives_429_and_500_through_the_retry_layer() {
    let p = MyProvider::new(
        "mine",
        vec![
            Err(ProviderError::http(
                429,
                "slow down",
                Some(Duration::from_secs(3)),
            )),
            Err(ProviderError::http(500, "oops", None)),
            Ok("three words here"),
        ],
    )
    .with_retry(fast_retry(1));
    let t0 = Instant::now();
    let resp = p.complete(&request()).await.expect("answers after retries");
    let took = since(t0);
    assert_eq!(resp.text(), Some("three words here"));
    assert_eq!(p.inner().calls(), 3);
    let a = attempts_of(&resp);
    let seen: Vec<_> = a.iter().map(|a| (a.outcome.as_str(), a.status)).collect();
    assert_eq!(
        seen,
        [("http", Some(429)), ("http", Some(500)), ("ok", None)]
    );
    assert_eq!(a[0].retry_after_ms, Some(3000));
    assert_eq!(a[0].backoff_ms, Some(3000), "Retry-After honoured");
    let second = a[1]
        .backoff_ms
        .expect("the 500 was retried after a backoff");
    assert!((100..=200).contains(&second), "{second} ms");
    assert!(took >= Duration::from_millis(3000 + second), "{took:?}");
    assert_eq!(
        u64::try_from(p.retry_time_spent().as_millis()).unwrap(),
        3000 + second,
        "waits count against the budget (the calls took no virtual time)"
    );
}

/// Streaming through the layer: deltas reach the sink, and a retry is announced with a
/// `Retry` event so the sink discards what the failed attempt sent.
#[tokio::test(start_paused = true)]
async fn a_streamed_call_keeps_streaming_through_the_retry_layer() {
    let p = MyProvider::new(
        "mine",
        vec![
            Err(ProviderError::Timeout {
                after: Duration::from_secs(1),
            }),
            Ok("one two three"),
        ],
    )
    .with_retry(fast_retry(2));
    let mut events = Vec::new();
    let resp = p.stream(&request(), &mut |e| events.push(e)).await.unwrap();
    assert_eq!(resp.text(), Some("one two three"));
    assert!(
        matches!(events[0], StreamEvent::Retry { attempt: 2, .. }),
        "{events:?}"
    );
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
        .count();
    assert_eq!(deltas, 3);
    assert_eq!(
        attempts_of(&resp)[0].mode,
        rath_provider::AttemptMode::Stream
    );
}

/// 400, 401, 403 and 404 are not retried: one call, the provider's own error.
#[tokio::test(start_paused = true)]
async fn refused_requests_are_not_retried() {
    for status in [400u16, 401, 403, 404] {
        let p = MyProvider::new(
            "mine",
            vec![
                Err(ProviderError::http(status, "no", None)),
                Ok("unreachable"),
            ],
        )
        .with_retry(fast_retry(3));
        let err = p.complete(&request()).await.unwrap_err();
        assert_eq!(err.status(), Some(status));
        assert!(matches!(err, ProviderError::Http { .. }), "{err:?}");
        assert_eq!(p.inner().calls(), 1, "{status} was retried");
    }
}

/// Retries stop at `max_retries` with every attempt listed and the reason.
#[tokio::test(start_paused = true)]
async fn retries_run_out_with_the_history() {
    let p = MyProvider::new(
        "mine",
        (0..5)
            .map(|_| Err(ProviderError::Connection("reset".into())))
            .collect(),
    )
    .with_retry(fast_retry(4).with_max_retries(2));
    let err = p.complete(&request()).await.unwrap_err();
    let ProviderError::RetriesExhausted {
        attempts, stopped, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((*attempts, stopped.as_str()), (3, "max_retries"));
    assert_eq!(p.inner().calls(), 3);
    assert!(err.is_unavailable());
}

/// The budget layer refuses a request that could pass the budget, without sending it.
#[tokio::test]
async fn the_budget_refuses_unsent() {
    let script = (0..10).map(|_| Ok("ok")).collect();
    let p = MyProvider::new("mine", script).with_budget(60);
    let req = request();
    // Worst case: the prompt estimate plus the manifest's max_tokens (10); each answer
    // costs its usage, 25 tokens.
    let needed = req.estimated_prompt_tokens() + 10;
    assert!(needed <= 35, "estimate {needed}");
    p.complete(&req).await.unwrap();
    assert_eq!(p.used_tokens(), 25);
    p.complete(&req).await.unwrap();
    assert_eq!(p.used_tokens(), 50);
    let err = p.complete(&req).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::BudgetExceeded { budget: 60, used: 50, needed: n } if n == needed),
        "{err:?}"
    );
    assert_eq!(p.inner().calls(), 2, "the refused request was never sent");
    assert_eq!(p.used_tokens(), 50);
    assert!(!err.is_unavailable(), "a refusal is not an outage");
}

/// A real closed port through `OpenAiProvider` (retried once), then a second provider
/// that answers: the fallback layer answers from the second and says so.
#[tokio::test]
async fn the_fallback_answers_when_the_first_is_down() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let down = OpenAiProvider::new(OpenAiConfig::new(
        format!("http://127.0.0.1:{port}/v1"),
        "m",
    ))
    .unwrap()
    .with_retry(fast_retry(5).with_max_retries(1));
    let p = down.with_fallback(MyProvider::new("spare", vec![Ok("from the spare")]));
    let resp = p.complete(&request()).await.expect("the spare answers");
    assert_eq!(resp.text(), Some("from the spare"));
    assert_eq!(resp.provider, "spare");
    assert_eq!(
        resp.detail["provider_fallback"]["from"],
        "openai-compatible"
    );
    assert_eq!(resp.detail["provider_fallback"]["error"], "connection");
    assert_eq!(p.secondary().calls(), 1);

    // A refusal of the first is not sent to the second.
    let refusing = MyProvider::new("first", vec![Err(ProviderError::http(401, "key", None))]);
    let p = refusing.with_fallback(MyProvider::new("spare", vec![Ok("never")]));
    let err = p.complete(&request()).await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert_eq!(p.secondary().calls(), 0);
}

/// A streamed call that fails after sending deltas tells the sink to discard them before
/// the second provider's.
#[tokio::test]
async fn a_streamed_fallback_announces_the_switch() {
    struct HalfStream;
    #[async_trait]
    impl Provider for HalfStream {
        fn name(&self) -> &str {
            "half"
        }
        async fn complete(&self, _: &ProviderRequest) -> Result<ProviderResponse, ProviderError> {
            Err(ProviderError::Connection("cut".into()))
        }
        async fn stream(
            &self,
            _: &ProviderRequest,
            sink: &mut StreamSink<'_>,
        ) -> Result<ProviderResponse, ProviderError> {
            sink(StreamEvent::TextDelta { text: "par".into() });
            Err(ProviderError::Connection("cut mid-stream".into()))
        }
        fn manifest(&self) -> ProviderManifest {
            ProviderManifest::new("half")
        }
    }
    let p = HalfStream.with_fallback(MyProvider::new("spare", vec![Ok("whole answer")]));
    let mut events = Vec::new();
    let resp = p.stream(&request(), &mut |e| events.push(e)).await.unwrap();
    let mut asm = rath_provider::StreamAssembler::default();
    events.iter().for_each(|e| asm.push(e));
    assert_eq!(asm.chunk_for(&resp.request_id), resp.chunk);
    assert!(matches!(events[1], StreamEvent::Retry { .. }), "{events:?}");
}

/// Two requests per second: five calls start at 0, 0, 1, 1 and 2 s (virtual time), also
/// when they are made at once; a call dropped while waiting takes no turn.
#[tokio::test(start_paused = true)]
async fn the_rate_limit_spaces_requests() {
    let script = (0..11).map(|_| Ok("ok")).collect();
    let p =
        MyProvider::new("mine", script).with_rate_limit(RateLimit::new(2, Duration::from_secs(1)));
    let t0 = Instant::now();
    let mut starts = Vec::new();
    for _ in 0..5 {
        p.complete(&request()).await.unwrap();
        starts.push(since(t0).as_millis());
    }
    assert_eq!(starts, [0, 0, 1000, 1000, 2000]);

    // At once: the same spacing.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t1 = Instant::now();
    let req = request();
    let timed = || async {
        p.complete(&req).await.unwrap();
        since(t1).as_millis()
    };
    let (a, b, c) = tokio::join!(timed(), timed(), timed());
    let mut at = [a, b, c];
    at.sort_unstable();
    assert_eq!(at, [0, 0, 1000]);

    // A call cancelled while it waits leaves the turns alone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t2 = Instant::now();
    p.complete(&req).await.unwrap();
    p.complete(&req).await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(500), p.complete(&req)).await;
    assert!(cancelled.is_err(), "the third call had to wait");
    p.complete(&req).await.unwrap();
    assert_eq!(since(t2).as_millis(), 1000);
    assert_eq!(p.inner().calls(), 5 + 3 + 3);
}

/// Jitter stays within [cap/2, cap] and is deterministic for a seed.
#[tokio::test(start_paused = true)]
async fn jitter_is_bounded_and_seeded() {
    let r = Retry::default().with_backoff(Duration::from_millis(100), Duration::from_millis(350));
    for i in 0..=100 {
        let unit = f64::from(i) / 100.0;
        let d1 = r.backoff(1, None, unit);
        assert!(
            d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100),
            "{d1:?}"
        );
        let d3 = r.backoff(3, None, unit);
        assert!(
            d3 >= Duration::from_millis(175) && d3 <= Duration::from_millis(350),
            "{d3:?}"
        );
    }
    assert_eq!(r.backoff(1, None, f64::NAN), Duration::from_millis(100));
    assert_eq!(r.backoff(1, None, 7.0), Duration::from_millis(100));

    let waits = |seed: u64| async move {
        let script = (0..4)
            .map(|_| Err(ProviderError::http(503, "busy", None)))
            .chain([Ok("ok")])
            .collect();
        let p = MyProvider::new("mine", script).with_retry(fast_retry(seed).with_max_retries(4));
        let resp = p.complete(&request()).await.unwrap();
        attempts_of(&resp)
            .iter()
            .filter_map(|a| a.backoff_ms)
            .collect::<Vec<_>>()
    };
    let a = waits(42).await;
    assert_eq!(a, waits(42).await, "same seed, same waits");
    assert_ne!(a, waits(43).await, "another seed, other waits");
    for (i, w) in a.iter().enumerate() {
        let cap = 100u64 << i;
        assert!((cap / 2..=cap).contains(w), "retry {}: {w} ms", i + 1);
    }
}

/// The manifest of a stack lists its layers, outermost first, with their settings.
#[test]
fn a_stacked_manifest_lists_the_layers() {
    let p = MyProvider::new("mine", vec![])
        .with_rate_limit(RateLimit::per_minute(30))
        .with_retry(Retry::default().with_jitter(Jitter::Seeded(9)))
        .with_budget(1000)
        .with_fallback(MyProvider::new("spare", vec![]));
    let m = serde_json::to_value(p.manifest()).unwrap();
    assert_eq!(m["provider"], "mine");
    let names: Vec<_> = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["layer"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["fallback", "budget", "retry", "rate_limit"]);
    assert_eq!(m["layers"][0]["settings"]["secondary"]["provider"], "spare");
    assert_eq!(m["layers"][1]["settings"]["token_budget"], 1000);
    assert_eq!(m["layers"][2]["settings"]["max_retries"], 3);
    assert_eq!(m["layers"][2]["settings"]["jitter"]["seed"], 9);
    assert_eq!(m["layers"][3]["settings"]["requests"], 30);
    assert_eq!(m["layers"][3]["settings"]["per_ms"], 60_000);
}
