//! Connections a client opens and never uses cannot lock anyone out: a header sent a byte at
//! a time and a connection that sends nothing are closed after the header timeout, thousands
//! of idle connections leave the server answering, and past the connection cap new
//! connections wait for a slot instead of failing.

mod common;

use std::time::Duration;

use common::{Harness, config};
use rath_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A wait of minutes that only guards these tests against a hang, never a measurement.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn addr(h: &Harness) -> String {
    h.base.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection; what it sent before closing.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_header_and_a_silent_connection_are_closed_after_the_header_timeout() {
    let h = Harness::sqlite(ServerConfig {
        header_timeout: Duration::from_millis(300),
        ..config()
    })
    .await;
    // Slowloris: the start of a request, then nothing more.
    let mut slow = TcpStream::connect(addr(&h)).await.unwrap();
    slow.write_all(b"GET /health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    // A connection that never sends a byte.
    let mut silent = TcpStream::connect(addr(&h)).await.unwrap();
    for (name, stream) in [("slow header", &mut slow), ("silent", &mut silent)] {
        let sent = tokio::time::timeout(HANG_GUARD, until_closed(stream))
            .await
            .unwrap_or_else(|_| panic!("the {name} connection was never closed"));
        // A request that was never whole gets no answer, or a 408.
        let text = String::from_utf8_lossy(&sent);
        assert!(
            sent.is_empty() || text.starts_with("HTTP/1.1 408"),
            "{name}: {text}"
        );
    }
    // A whole request on a fresh connection is served as ever.
    let (status, _) = h
        .call(reqwest::Method::GET, "/health/ready", None, None)
        .await;
    assert_eq!(status, 200);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_idle_connections_leave_the_server_answering() {
    const IDLE: usize = 5000;
    // Client and server ends share this process: 10,000 descriptors and some. Raise the
    // soft file limit toward the hard one (as a server's service file would); a machine
    // whose hard limit is lower cannot run this test.
    if !raise_file_limit(3 * IDLE as u64) {
        rath_testkit::skip("idle connections: the hard limit on open files is under 15,000");
        return;
    }
    // The idle connections never time out during the test: a request queued behind them
    // would wait the whole header timeout (ten minutes), far past the hang guard.
    let h = Harness::sqlite(ServerConfig {
        header_timeout: Duration::from_secs(600),
        ..config()
    })
    .await;
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        match TcpStream::connect(addr(&h)).await {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connection {i} of {IDLE} refused: {e}"),
        }
    }
    let (status, body) = tokio::time::timeout(
        HANG_GUARD,
        h.call(
            reqwest::Method::GET,
            "/v1/sessions",
            Some(&h.a.clone()),
            None,
        ),
    )
    .await
    .expect("an authenticated request is answered beside the idle connections");
    assert_eq!(status, 200, "{body}");
    // The idle connections are all still open: none was dropped to make room.
    let mut open = 0;
    for s in &idle {
        let mut b = [0u8; 1];
        if matches!(s.try_read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            open += 1;
        }
    }
    assert_eq!(open, IDLE);
    drop(idle);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_connection_waits_for_a_slot() {
    let h = Harness::sqlite(ServerConfig {
        header_timeout: Duration::from_secs(600),
        max_connections: 3,
        ..config()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr(&h)).await.unwrap());
    }
    // The fourth connects (the kernel queues it) but is not served while three are open.
    let mut fourth = TcpStream::connect(addr(&h)).await.unwrap();
    fourth
        .write_all(b"GET /health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    let early = tokio::time::timeout(Duration::from_millis(300), fourth.read(&mut first)).await;
    assert!(early.is_err(), "served past the cap: {early:?}");
    // One closes: the fourth gets its slot and its answer.
    drop(held.pop());
    let answer = tokio::time::timeout(HANG_GUARD, until_closed(&mut fourth))
        .await
        .expect("served once a slot was free");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    drop(held);
    h.stop().await;
}

/// Raises this process's soft limit on open files to at least `want` when the hard limit
/// allows; true when the soft limit is then at least `want`.
fn raise_file_limit(want: u64) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the struct they are given, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return false;
        }
        if lim.rlim_cur >= want {
            return true;
        }
        if lim.rlim_max < want {
            return false;
        }
        lim.rlim_cur = want;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0
    }
}
