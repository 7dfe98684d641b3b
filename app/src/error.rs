//! The error every console server function answers with: the admin API's body,
//! `{"code", "message"}`, so a program reads the same code from both surfaces and the page
//! shows the message. Refusals carry their 4xx status (set where they are made); what the
//! framework itself reports (arguments it could not read, a network failure) is mapped here.

use leptos::server_fn::{
    codec::JsonEncoding,
    error::{FromServerFnError, ServerFnErrorErr},
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleFnError {
    /// What went wrong, for programs: the admin API's code for the same refusal.
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

impl ConsoleFnError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// Something the page asked for that does not exist (a malformed id in the address).
    pub fn not_found() -> Self {
        Self::new("NOT_FOUND", "not found")
    }
}

impl std::fmt::Display for ConsoleFnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl FromServerFnError for ConsoleFnError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(error: ServerFnErrorErr) -> Self {
        let code = match &error {
            // Arguments the server could not read are the caller's mistake; on the server, a
            // body that does not deserialize (a JSON argument of the wrong type) is one too.
            ServerFnErrorErr::Args(_) | ServerFnErrorErr::MissingArg(_) => "BAD_REQUEST",
            ServerFnErrorErr::Deserialization(_) if cfg!(feature = "ssr") => "BAD_REQUEST",
            // In the browser: the server was not reached, or its answer was not readable.
            ServerFnErrorErr::Request(_) | ServerFnErrorErr::Deserialization(_) => "UNAVAILABLE",
            _ => "INTERNAL",
        };
        #[cfg(feature = "ssr")]
        if code == "BAD_REQUEST" {
            // Without this the framework answers its own 500.
            if let Some(response) = leptos::prelude::use_context::<leptos_axum::ResponseOptions>() {
                response.set_status(http::StatusCode::BAD_REQUEST);
            }
        }
        Self::new(code, error.to_string())
    }
}

impl From<ServerFnErrorErr> for ConsoleFnError {
    fn from(error: ServerFnErrorErr) -> Self {
        Self::from_server_fn_error(error)
    }
}
