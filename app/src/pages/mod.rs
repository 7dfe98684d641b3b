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

/// A list page's body: a note when there is nothing to list, the table when there is,
/// the error otherwise.
pub fn listing<T>(
    rows: Result<Vec<T>, ServerFnError>,
    nothing: &'static str,
    table: impl FnOnce(Vec<T>) -> AnyView,
) -> AnyView {
    match rows {
        Ok(rows) if rows.is_empty() => view! { <p class="empty">{nothing}</p> }.into_any(),
        Ok(rows) => table(rows),
        Err(error) => error_box(error),
    }
}
