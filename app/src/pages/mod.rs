//! One module per console page; `layout` holds the navigation shared by all but login.

pub mod activities;
pub mod items;
pub mod layout;
pub mod login;
pub mod prewarm;
pub mod unbuilt;

use leptos::prelude::*;

/// A server function's error, shown where the page's content would be.
pub fn error_box(error: ServerFnError) -> AnyView {
    let message = match error {
        ServerFnError::ServerError(message) => message,
        other => other.to_string(),
    };
    view! { <p class="error" role="alert">{message}</p> }.into_any()
}
