//! Serving connections: hyper's HTTP/1 and HTTP/2 with a header-read timeout, and a cap on
//! the connections open at once below the process's file limit.
//!
//! `axum::serve` sets no timer on hyper, so hyper's header-read timeout never fires and a
//! connection that sends nothing (or a header a byte a minute) is held for good; nor does it
//! bound how many connections it accepts, so enough idle ones use up the file limit and the
//! accept loop then fails for everyone. Here each connection gets hyper's own
//! `header_read_timeout` (it also runs while a keep-alive connection waits for its next
//! request, so an idle connection is closed after the same time; a response being streamed,
//! an SSE stream, is never cut by it), the same time to send its first byte (before which
//! hyper's protocol detection runs no timer), and a semaphore admits at most
//! [`ServerConfig::max_connections`](crate::ServerConfig::max_connections) connections: past
//! that, new connections wait in the kernel's accept queue until one closes, and no accept
//! ever fails for want of a descriptor.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rath_flow::CancellationToken;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Descriptors kept free of connections for everything else the server opens (database
/// pools, session files, the worker's processes), as a share of the file limit.
const RESERVE_DIVISOR: u64 = 8;
/// At least this many descriptors are kept free.
const RESERVE_MIN: u64 = 256;

/// The default connection cap: the soft file limit less a reserve (an eighth, at least
/// 256), and at least 64. Unlimited when the limit cannot be read.
pub fn default_max_connections() -> usize {
    let soft = file_limit().unwrap_or(u64::MAX);
    if soft == u64::MAX {
        return usize::MAX;
    }
    let reserve = (soft / RESERVE_DIVISOR).max(RESERVE_MIN);
    usize::try_from(soft.saturating_sub(reserve).max(64)).unwrap_or(usize::MAX)
}

/// The soft limit on open files (`RLIMIT_NOFILE`), `None` when it cannot be read.
#[cfg(unix)]
fn file_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and touches nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

#[cfg(not(unix))]
fn file_limit() -> Option<u64> {
    None
}

/// Serves `router` on `listener` until `stop` is cancelled, then stops accepting and waits
/// for the open connections to finish (idle ones are closed at once).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    stop: CancellationToken,
    header_timeout: Duration,
    max_connections: usize,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .enable_connect_protocol();
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS)));
    let graceful = GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break, // never closed; a closed semaphore would end serving
            },
            () = stop.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or memory, or a connection reset before it was
                    // accepted: nothing a client did, so wait a moment and go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(100)) => {}
                        () = stop.cancelled() => break,
                    }
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let header_wait = header_timeout;
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            // hyper's auto builder reads a connection's first bytes (to tell HTTP/1 from
            // HTTP/2) before any header timer runs, so a connection that sends nothing
            // would be held for good: it gets the same time for its first byte.
            let mut first = [0u8; 1];
            match tokio::time::timeout(header_wait, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return drop(permit),
            }
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, "connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
