//! Extractors that answer bad input with the server's JSON error (axum's own answer with
//! plain text), and the opaque paging cursor.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::ServerError;

/// A JSON body; malformed JSON, wrong types, a wrong content type and an oversized body are
/// each a 4xx [`ServerError::Rejected`].
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ServerError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(e) => Err(json_rejection(e)),
        }
    }
}

fn json_rejection(e: JsonRejection) -> ServerError {
    let status = e.status();
    let message = if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        "the request body is over the server's limit".to_owned()
    } else {
        e.body_text()
    };
    ServerError::Rejected { status, message }
}

/// Query parameters; a bad one is a 400.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(q) => Ok(ApiQuery(q.0)),
            Err(e) => Err(query_rejection(e)),
        }
    }
}

fn query_rejection(e: QueryRejection) -> ServerError {
    ServerError::BadRequest(e.body_text())
}

/// Path parameters; a bad one is a 400.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(p) => Ok(ApiPath(p.0)),
            Err(e) => Err(path_rejection(e)),
        }
    }
}

fn path_rejection(e: PathRejection) -> ServerError {
    ServerError::BadRequest(e.body_text())
}

/// An opaque paging cursor: `what` (which listing it belongs to) and a position, as hex so a
/// client passes it back without reading it. A cursor of another listing, or one that is
/// not hex of the right form, is a 400.
pub(crate) fn encode_cursor(what: &str, position: &str) -> String {
    hex::encode(format!("{what}\n{position}"))
}

/// The position a cursor of listing `what` holds.
pub(crate) fn decode_cursor(what: &str, cursor: &str) -> Result<String, ServerError> {
    let bad = || ServerError::BadRequest(format!("bad cursor {cursor:?}"));
    let bytes = hex::decode(cursor).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (w, position) = text.split_once('\n').ok_or_else(bad)?;
    if w != what {
        return Err(bad());
    }
    Ok(position.to_owned())
}

/// A page size: default 50, at most 500, at least 1.
pub(crate) fn page_size(limit: Option<usize>) -> Result<usize, ServerError> {
    match limit {
        None => Ok(50),
        Some(n) if (1..=500).contains(&n) => Ok(n),
        Some(n) => Err(ServerError::BadRequest(format!(
            "limit {n} is outside 1..=500"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_listings_and_garbage() {
        let c = encode_cursor("sessions", "42\nx");
        assert_eq!(decode_cursor("sessions", &c).unwrap(), "42\nx");
        assert!(decode_cursor("runs", &c).is_err());
        assert!(decode_cursor("sessions", "zz").is_err());
        assert!(decode_cursor("sessions", "00ff").is_err());
        assert!(page_size(Some(0)).is_err());
        assert_eq!(page_size(None).unwrap(), 50);
    }
}
