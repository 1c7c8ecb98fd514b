//! Operations endpoints: liveness, readiness (the stores answer), metrics, and the admin
//! key endpoints.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use rath_session::SessionId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Admin;
use crate::db::{KeyInfo, MintedKey};
use crate::error::ErrorBody;
use crate::extract::{ApiJson, ApiPath};
use crate::{AppState, ServerError};

/// A health answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// The process is up.
#[utoipa::path(get, path = "/health/live", tag = "operations",
    responses((status = 200, description = "The process answers", body = Health)))]
pub(crate) async fn live() -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok".into(),
    })
}

/// The session store, the run store and the server's tables answer.
#[utoipa::path(get, path = "/health/ready", tag = "operations",
    responses(
        (status = 200, description = "Every store answers", body = Health),
        (status = 503, description = "A store does not answer", body = ErrorBody)))]
pub(crate) async fn ready(
    State(state): State<Arc<AppState>>,
) -> Result<axum::Json<Health>, ServerError> {
    let unavailable = |what: &str, e: &dyn std::fmt::Display| {
        tracing::warn!(error = %e, "{what} is not ready");
        ServerError::Unavailable(what.to_owned())
    };
    state
        .db
        .ping()
        .await
        .map_err(|e| unavailable("server tables", &e))?;
    state
        .runtime
        .runs()
        .schema_version()
        .await
        .map_err(|e| unavailable("run store", &e))?;
    state
        .runtime
        .sessions()
        .stored_len(&SessionId::new("__rath_server_ready__"))
        .await
        .map_err(|e| unavailable("session store", &e))?;
    Ok(axum::Json(Health {
        status: "ok".into(),
    }))
}

/// Prometheus text exposition: requests, latencies, runs by status, queue depth.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text format 0.0.4", body = String,
        content_type = "text/plain; version=0.0.4")))]
pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let runs = match state.runtime.runs().list(None).await {
        Ok(runs) => {
            let mut by: HashMap<_, u64> = HashMap::new();
            for r in runs {
                *by.entry(r.status).or_default() += 1;
            }
            Some(by)
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the run store did not answer");
            None
        }
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(&state, runs.as_ref()),
    )
}

/// What a new key is for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// The tenant whose sessions and runs the key reaches.
    pub tenant: String,
    /// True for an admin key.
    #[serde(default)]
    pub admin: bool,
    /// A label (who or what it is for).
    #[serde(default)]
    pub label: String,
}

/// Mints a key (admin only); its secret is in this answer and nowhere else.
#[utoipa::path(post, path = "/v1/keys", tag = "keys", request_body = NewKey,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "The key, with its secret", body = MintedKey),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
pub(crate) async fn create_key(
    State(state): State<Arc<AppState>>,
    _admin: Admin,
    ApiJson(req): ApiJson<NewKey>,
) -> Result<(StatusCode, axum::Json<MintedKey>), ServerError> {
    let key = state
        .db
        .create_key(&req.tenant, req.admin, &req.label)
        .await?;
    tracing::info!(key = %key.info.id, tenant = %key.info.tenant, "key minted");
    Ok((StatusCode::CREATED, axum::Json(key)))
}

/// Every key (admin only), without secrets or hashes.
#[utoipa::path(get, path = "/v1/keys", tag = "keys", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<KeyInfo>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn list_keys(
    State(state): State<Arc<AppState>>,
    _admin: Admin,
) -> Result<axum::Json<Vec<KeyInfo>>, ServerError> {
    Ok(axum::Json(state.db.list_keys().await?))
}

/// Revokes a key (admin only): it answers 401 from the next request on.
#[utoipa::path(delete, path = "/v1/keys/{id}", tag = "keys", security(("bearer" = [])),
    params(("id" = String, Path, description = "The key's id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn revoke_key(
    State(state): State<Arc<AppState>>,
    _admin: Admin,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ServerError> {
    if state.db.revoke_key(&id).await? {
        tracing::info!(key = %id, "key revoked");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ServerError::NotFound { what: "key", id })
    }
}
