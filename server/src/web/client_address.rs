//! The client's address in the HTTP layer: resolved once per request by [`remember`], the
//! outermost middleware, with the trusted proxies this instance was started with, and read
//! by handlers as the [`ClientAddress`] extractor (`ops::state`, beside the state it reads).
//! The rules of who the client is live in `base::client_address`.

use axum::extract::State;
use base::client_address::{resolve, ClientAddress};

use ops::state::AppState;

/// Middleware: resolves the client once and keeps it with the request.
pub(crate) async fn remember(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> axum::extract::Request {
    let (mut parts, body) = request.into_parts();
    let client = resolve(&state.settings.trusted_proxies, &parts);
    parts.extensions.insert(ClientAddress(client));
    axum::extract::Request::from_parts(parts, body)
}
