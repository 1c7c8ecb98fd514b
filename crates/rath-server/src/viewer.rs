//! The live viewer served at `/`: one HTML page (inline CSS and JS, nothing fetched from
//! elsewhere) that reads the server's own API with a key the user gives it: the tenant's
//! runs with their status live (each run in flight followed on its event stream), the
//! lineage graph of its sessions (one `g.node` per session, one `line.edge` per parent link
//! on the page) and the transcript of the session clicked, evidence included.
//!
//! The page holds no data and needs no key to load; every request it makes carries the key
//! (`Authorization: Bearer`), so it sees exactly what that key sees. A key may be handed over
//! in the fragment, `/#key=...`, which never reaches the server and is removed from the
//! address bar on load. Text from the store is only ever set as text, never parsed as HTML,
//! and the page is served with a Content-Security-Policy that allows nothing but its own
//! inline code and requests to this server.

use axum::http::header;
use axum::response::IntoResponse;

/// The page.
const PAGE: &str = include_str!("viewer.html");

/// What the page may do: its own inline script and style, requests to this origin, nothing
/// else (no frames, no forms posting elsewhere, no plugins).
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// `GET /`: the viewer page.
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
}
