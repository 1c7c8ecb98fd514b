//! The one error type of the server, and how each error answers over HTTP.
//!
//! Every error a handler returns becomes a status and the body
//! `{"error": {"kind": "...", "message": "..."}}`. Bad input (unknown ids, malformed JSON,
//! wrong types, oversized bodies, bad cursors, a refused merge, a decision on a call already
//! decided) is always a 4xx; only a failure of the server's own stores is a 5xx, and its
//! message names what failed without the store's URL or any credential.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rath_persist::PersistError;
use rath_runtime::RuntimeError;
use serde::Serialize;
use utoipa::ToSchema;

/// Everything that can go wrong in the server, from a request's bad input to a store that
/// stopped answering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No API key, or one the server does not know or has revoked (401).
    #[error("missing, unknown or revoked API key")]
    Unauthorized,
    /// A tenant key asked for an admin operation (403).
    #[error("this operation needs an admin key")]
    Forbidden,
    /// No such resource for this key's tenant (404): another tenant's ids answer the same.
    #[error("no {what} {id}")]
    NotFound {
        /// What was looked for (`session`, `run`, `key`, `pending call`, `route`).
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// A request that does not say what it means: bad query, bad cursor, unknown workflow
    /// (400).
    #[error("{0}")]
    BadRequest(String),
    /// The request body was refused by its extractor (malformed JSON, wrong types, wrong
    /// content type, too large): the extractor's 4xx status and its reason.
    #[error("{message}")]
    Rejected {
        /// The 4xx status.
        status: StatusCode,
        /// Why.
        message: String,
    },
    /// The request conflicts with what is stored: a merge the strict rule refuses, a
    /// decision on a call already decided, cancelling a finished run (409).
    #[error("{0}")]
    Conflict(String),
    /// The key's rate limit is spent; retry after the given seconds (429).
    #[error("rate limit exceeded; retry in {retry_after_s} s")]
    RateLimited {
        /// Seconds until a request is allowed again.
        retry_after_s: u64,
    },
    /// A store the server needs did not answer (503 from `/health/ready`, 500 elsewhere).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The run store or the runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The session store failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The server's own tables failed (`sv_*`).
    #[error("server tables: {0}")]
    Db(String),
    /// Binding or serving the socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl From<sqlx::Error> for ServerError {
    fn from(e: sqlx::Error) -> Self {
        ServerError::Db(e.to_string())
    }
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong: a stable machine-readable `kind` and a human `message`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `unauthorized`, `forbidden`, `not_found`, `bad_request`, `payload_too_large`,
    /// `unsupported_media_type`, `unprocessable`, `conflict`, `rate_limited`, `unavailable`,
    /// `internal`.
    pub kind: String,
    /// What happened, for a person.
    pub message: String,
}

impl ServerError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServerError::Unauthorized => StatusCode::UNAUTHORIZED,
            ServerError::Forbidden => StatusCode::FORBIDDEN,
            ServerError::NotFound { .. } => StatusCode::NOT_FOUND,
            ServerError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServerError::Rejected { status, .. } => *status,
            ServerError::Conflict(_) => StatusCode::CONFLICT,
            ServerError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ServerError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ServerError::Runtime(e) => runtime_status(e),
            ServerError::Persist(e) => persist_status(e),
            ServerError::Db(_) | ServerError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable `kind` word of the error body.
    pub fn kind(&self) -> &'static str {
        kind_of(self.status())
    }

    /// The message a client sees: the error's text for a 4xx; for a 5xx only what failed
    /// (driver messages may carry host names; they go to the log instead).
    fn public_message(&self) -> String {
        if self.status().is_server_error() {
            match self {
                ServerError::Unavailable(_) => "a store the server needs is unavailable".into(),
                ServerError::Runtime(_) => "the run store failed".into(),
                ServerError::Persist(_) => "the session store failed".into(),
                _ => "the server failed".into(),
            }
        } else {
            self.to_string()
        }
    }
}

fn runtime_status(e: &RuntimeError) -> StatusCode {
    match e {
        RuntimeError::NoSuchRun(_) => StatusCode::NOT_FOUND,
        RuntimeError::UnknownWorkflow(_) => StatusCode::BAD_REQUEST,
        RuntimeError::BadState { .. } => StatusCode::CONFLICT,
        RuntimeError::Persist(p) => persist_status(p),
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn persist_status(e: &PersistError) -> StatusCode {
    match e {
        PersistError::NotFound { .. } => StatusCode::NOT_FOUND,
        PersistError::Conflict { .. } | PersistError::Exists { .. } => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The `kind` word for a status.
pub(crate) fn kind_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        422 => "unprocessable",
        429 => "rate_limited",
        503 => "unavailable",
        s if s >= 500 => "internal",
        _ => "bad_request",
    }
}

/// An error answer with `status`, `kind` and `message` (also what the fallbacks send).
pub(crate) fn error_response(status: StatusCode, kind: &str, message: String) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            kind: kind.to_owned(),
            message,
        },
    };
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut resp = error_response(status, self.kind(), self.public_message());
        if let ServerError::RateLimited { retry_after_s } = self
            && let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_4xx_and_store_failures_hide_their_text() {
        let nf = ServerError::Runtime(RuntimeError::NoSuchRun("run_x".into()));
        assert_eq!(nf.status(), StatusCode::NOT_FOUND);
        let bs = ServerError::Runtime(RuntimeError::BadState {
            run: "r".into(),
            status: "queued".into(),
            what: "decide".into(),
        });
        assert_eq!(bs.status(), StatusCode::CONFLICT);
        assert_eq!(bs.kind(), "conflict");
        let db = ServerError::Db("connect to postgres://u:secret@h/db failed".into());
        assert_eq!(db.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!db.public_message().contains("secret"));
    }
}
