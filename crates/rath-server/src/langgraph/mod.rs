//! The subset of LangGraph's server API that its official SDKs use, mapped onto our
//! workflows, sessions and durable runs, so an unmodified `langgraph-sdk` client can search
//! assistants, keep a thread, stream a run and read the thread's state and history.
//!
//! ```
//! // What a thread's state looks like to a LangGraph client: the session's conversation
//! // as LangChain messages, each with an id derived from the chunk it shows.
//! use rath_server::langgraph_messages;
//! use rath_session::{Chunk, Session, Stamper};
//!
//! let s = Session::user_with("hi", Stamper::seeded(1)).push(Chunk::assistant_text("hello"));
//! let messages = langgraph_messages("thread-1", &s);
//! assert_eq!(messages[0]["type"], "human");
//! assert_eq!(messages[1]["type"], "ai");
//! assert_eq!(messages[1]["content"], "hello");
//! assert_eq!(messages, langgraph_messages("thread-1", &s)); // ids are stable
//! assert_ne!(messages[0]["id"], messages[1]["id"]);
//! ```
//!
//! The mapping (the routes are in [`crate::openapi`] under the `langgraph` tag):
//! - an **assistant** is a registered workflow: `graph_id` is its name, `assistant_id` a
//!   UUID derived from its name and definition hash (a body may name either);
//! - a **thread** belongs to the key's tenant (`sv_threads`); its **state** is the session
//!   its newest started run reached (the output session, or the newest one the run wrote),
//!   and each new run's input session continues it (a fork of that session with the new
//!   messages appended);
//! - a **run** is a durable run of the runtime (also visible at `/v1/runs/{id}`);
//! - a **checkpoint** is a state we can show: each run's input session, then the prefix of
//!   its output session after each conversation message the run added.
//!
//! This module owns only the translation: it stores through [`crate::ServerDb`] and the
//! runtime like the native API, and must not keep state of its own.

mod body;
mod convert;
mod history;
mod runs;
mod threads;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::db::Principal;
use crate::{AppState, ServerError};

pub use convert::messages as langgraph_messages;
pub use runs::{LgRun, RunCreate};
pub use threads::{
    Assistant, AssistantSearch, Checkpoint, HistoryRequest, Thread, ThreadCreate, ThreadState,
};

/// The routes of the LangGraph-compatible API.
pub(crate) fn router() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(threads::search_assistants))
        .routes(routes!(threads::get_assistant))
        .routes(routes!(threads::create_thread))
        .routes(routes!(threads::get_thread))
        .routes(routes!(threads::get_state))
        .routes(routes!(threads::history))
        .routes(routes!(runs::create, runs::list))
        .routes(routes!(runs::stream))
        .routes(routes!(runs::wait))
        .routes(routes!(runs::get))
        .routes(routes!(runs::join))
        .routes(routes!(runs::join_stream))
        .routes(routes!(runs::cancel))
}

/// The error body of this API: `{"detail": "..."}`, as LangGraph's server answers (the
/// Python SDK reads `detail` into its exception's message).
#[derive(Debug, Serialize, ToSchema)]
pub struct LgErrorBody {
    /// What went wrong.
    pub detail: String,
}

/// A [`ServerError`] answered in LangGraph's shape (same status, `{"detail": ...}`).
#[derive(Debug)]
pub(crate) struct LgError(pub(crate) ServerError);

impl<E: Into<ServerError>> From<E> for LgError {
    fn from(e: E) -> Self {
        LgError(e.into())
    }
}

impl IntoResponse for LgError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        if status.is_server_error() {
            tracing::error!(error = %self.0, "request failed");
        }
        let detail = if status.is_server_error() {
            "the server failed".to_owned()
        } else {
            self.0.to_string()
        };
        let mut resp = (status, axum::Json(LgErrorBody { detail })).into_response();
        if let ServerError::RateLimited { retry_after_s } = self.0
            && let Ok(v) = axum::http::HeaderValue::from_str(&retry_after_s.to_string())
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, v);
        }
        resp
    }
}

/// A 404 for `what` `id`, in the words LangGraph's server uses.
pub(crate) fn not_found(what: &'static str, id: &str) -> LgError {
    LgError(ServerError::NotFound {
        what,
        id: id.to_owned(),
    })
}

/// A 422 for a request this API understands but cannot do.
pub(crate) fn unprocessable(message: impl Into<String>) -> LgError {
    LgError(ServerError::Rejected {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        message: message.into(),
    })
}

/// The caller, by `x-api-key` (what the SDKs send) or `Authorization: Bearer`; a missing
/// or unknown key is a 401 in this API's error shape.
#[derive(Debug)]
pub(crate) struct LgPrincipal(pub(crate) Principal);

impl FromRequestParts<Arc<AppState>> for LgPrincipal {
    type Rejection = LgError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Ok(LgPrincipal(
            Principal::from_request_parts(parts, state).await?,
        ))
    }
}

/// A lenient JSON body: empty means `{}`, keys the type does not name are ignored, any
/// content type is read as JSON (LangGraph's server is this forgiving; the SDKs rely on
/// it). Malformed JSON is a 400, a wrong type a 422, an oversized body a 413.
#[derive(Debug)]
pub(crate) struct LgJson<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for LgJson<T> {
    type Rejection = LgError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            LgError(ServerError::Rejected {
                status,
                message: if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "the request body is over the server's limit".into()
                } else {
                    e.body_text()
                },
            })
        })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        let value: serde_json::Value = serde_json::from_slice(text)
            .map_err(|e| LgError(ServerError::BadRequest(format!("malformed JSON: {e}"))))?;
        let value = if value.is_null() {
            serde_json::json!({})
        } else {
            value
        };
        serde_json::from_value(value)
            .map(LgJson)
            .map_err(|e| unprocessable(format!("bad request body: {e}")))
    }
}

/// Path parameters; a bad one is a 400 in this API's error shape.
#[derive(Debug)]
pub(crate) struct LgPath<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for LgPath<T> {
    type Rejection = LgError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| LgPath(p.0))
            .map_err(|e| LgError(ServerError::BadRequest(e.body_text())))
    }
}

/// A UUID-shaped id (version 8: "custom") from the sha256 of `parts`: the same parts give
/// the same id on every call, in every process.
pub(crate) fn derived_uuid(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        uuid_part(&mut h, p.as_bytes());
    }
    uuid_of(h)
}

/// Adds one part of a [`derived_uuid`] to `h`: its bytes and a separator.
pub(crate) fn uuid_part(h: &mut Sha256, part: &[u8]) {
    h.update(part);
    h.update([0u8]);
}

/// The id of the parts hashed into `h` with [`uuid_part`] (see [`derived_uuid`]).
pub(crate) fn uuid_of(h: Sha256) -> String {
    // Hex digits and dashes are ASCII.
    uuid_bytes(h).iter().map(|&c| c as char).collect()
}

/// [`uuid_of`] as its 36 ASCII bytes, made without an allocation.
pub(crate) fn uuid_bytes(h: Sha256) -> [u8; 36] {
    let digest: [u8; 32] = h.finalize().into();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut x = [0u8; 32];
    // 16 bytes always fit 32 hex digits.
    let _ = hex::encode_to_slice(b, &mut x);
    let mut id = [b'-'; 36];
    id[0..8].copy_from_slice(&x[0..8]);
    id[9..13].copy_from_slice(&x[8..12]);
    id[14..18].copy_from_slice(&x[12..16]);
    id[19..23].copy_from_slice(&x[16..20]);
    id[24..36].copy_from_slice(&x[20..32]);
    id
}

/// RFC 3339 of `ms` since the Unix epoch.
pub(crate) fn rfc3339(ms: i64) -> String {
    rath_session::Timestamp::from_unix_micros(ms.saturating_mul(1000)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_uuid_shaped_and_stable() {
        let a = derived_uuid(&["assistant", "echo", "h"]);
        assert_eq!(a, derived_uuid(&["assistant", "echo", "h"]));
        assert_ne!(a, derived_uuid(&["assistant", "echoh", ""]));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(rfc3339(1500), "1970-01-01T00:00:01.500000+00:00");
    }
}
