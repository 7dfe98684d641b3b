//! The admin console inside the server: its pages (server-rendered, then hydrated), its
//! server functions and its site folder, mounted with the state handed to the Leptos app as
//! context. The server functions (`app::api`) take that [`AppState`] and call the same use
//! cases as the admin API, so both enforce the same rules; the cross-site check in front of
//! both is [`csrf`].

pub(crate) mod csrf;
mod site;

use axum::{
    body::Body,
    extract::{FromRequest, Request},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::post,
    Form, Router,
};
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos::server_fn::ServerFn;
use leptos_axum::{generate_route_list, handle_server_fns_with_context, LeptosRoutes};

use base::{config::Settings, error::ApiError, slow_bodies};
use ops::state::AppState;
use sale::identity::rules;

/// Console pages (server-rendered, then hydrated), its server functions under
/// `/console/fn` (login behind [`login_gate`]), and the site folder (the `/pkg` bundle,
/// public assets) for the rest.
pub(crate) fn router(state: &AppState) -> Router<AppState> {
    let given = state.clone();
    let provide = move || provide_context(given.clone());
    let routes = generate_route_list(app::App);
    let leptos = leptos_options(&state.settings);
    let site = site::service(std::path::Path::new(leptos.site_root.as_ref()));
    let server_fn_context = provide.clone();
    let shell = leptos.clone();
    Router::new()
        .route(
            "/console/fn/{*name}",
            post(move |request: Request<Body>| {
                let provide = server_fn_context.clone();
                async move { handle_server_fns_with_context(provide, request).await }
            }),
        )
        .leptos_routes_with_context(&leptos, routes, provide, move || app::shell(shell.clone()))
        .fallback_service(site)
        .layer(middleware::from_fn(login_gate))
        // The pages take the Leptos options as their router state; the rest of the server's
        // routes take the whole state.
        .with_state(leptos)
}

/// Where the console's bundle lives and what it is called. A bundle built with
/// content-named files is named through its hash file; a site root without one (a bundle
/// built by an older script) keeps the plain names.
fn leptos_options(settings: &Settings) -> LeptosOptions {
    let hash_file = site::hash_file(&settings.site_root);
    LeptosOptions::builder()
        .output_name(app::BUNDLE_NAME)
        .site_root(settings.site_root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(settings.bind)
        .hash_files(hash_file.is_some())
        .hash_file(
            hash_file
                .map(|path| path.to_string_lossy().into_owned())
                .unwrap_or_else(|| "hash.txt".to_owned())
                .into(),
        )
        .build()
}

/// The login server function behind a gate of its own, because anyone may call it: the body
/// is read up to [`rules::MAX_LOGIN_BODY_BYTES`] (413 `PAYLOAD_TOO_LARGE` beyond), and a
/// username or password past its cap is answered 400 with its code, before the server
/// function (and Redis) sees either. A body that is not the login form is left to the
/// server function to refuse; every other request passes untouched.
async fn login_gate(request: Request, next: Next) -> Response {
    if request.uri().path() != <app::api::Login as ServerFn>::PATH {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // A body that did not arrive in time is the client's fault of another kind; any other
    // failure to read is answered as too large: past the limit is the only one left that a
    // client still waiting for the answer can cause.
    let bytes = match axum::body::to_bytes(body, rules::MAX_LOGIN_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) if slow_bodies::too_slow(&error) => {
            return ApiError::BadRequest(error.to_string()).into_response();
        }
        Err(_) => return ApiError::PayloadTooLarge.into_response(),
    };
    let as_form = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
    if let Ok(Form(login)) = Form::<app::api::Login>::from_request(as_form, &()).await {
        if let Err(too_long) = rules::check_login_input(&login.username, &login.password) {
            return ApiError::Invalid {
                code: too_long.code(),
                message: too_long.to_string(),
            }
            .into_response();
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
