//! The console's site folder (the `/pkg` bundle and the public assets) as browsers should get
//! it: `scripts/build-front.sh` names the bundle's files after their content
//! (`seckill_console.HASH.wasm`) and writes a brotli and a gzip copy of each beside it, so the
//! server sends the smallest copy the browser accepts without compressing anything per request,
//! and lets browsers keep a content-named file for a year: a new build is a new name, which the
//! pages name through `pkg/hash.txt` (read by Leptos's hydration scripts and the shell's
//! stylesheet link). Every other file is revalidated on each use (`no-cache`), because its name
//! outlives its content.

use axum::{
    extract::Request,
    middleware::{self, Next},
    response::Response,
    Router,
};
use http::{header, HeaderValue};
use std::path::{Path, PathBuf};
use tower_http::services::ServeDir;

/// The file, under the site root, that names the current build's hashed files.
pub(crate) const HASH_FILE: &str = "pkg/hash.txt";

/// What a content-named file may be kept for: it never changes under its name.
const IMMUTABLE: HeaderValue = HeaderValue::from_static("public, max-age=31536000, immutable");
/// Anything else: kept, but asked about again before each use.
const REVALIDATE: HeaderValue = HeaderValue::from_static("no-cache");

/// The hash file's path when the site root holds one: Leptos then names the hashed files in
/// its pages. It must be absolute, because Leptos joins it to the running binary's folder.
pub(crate) fn hash_file(site_root: &Path) -> Option<PathBuf> {
    let path = std::path::absolute(site_root.join(HASH_FILE)).ok()?;
    path.is_file().then_some(path)
}

/// The site folder as a fallback router: precompressed copies first, caching by name.
pub(crate) fn service(site_root: &Path) -> Router {
    let files = ServeDir::new(site_root)
        .precompressed_br()
        .precompressed_gzip();
    Router::new()
        .fallback_service(files)
        .layer(middleware::from_fn(cache_by_name))
}

async fn cache_by_name(request: Request, next: Next) -> Response {
    let immutable = is_content_named(request.uri().path());
    let mut response = next.run(request).await;
    if response.status().is_success() || response.status() == http::StatusCode::NOT_MODIFIED {
        let headers = response.headers_mut();
        let policy = if immutable { IMMUTABLE } else { REVALIDATE };
        headers.insert(header::CACHE_CONTROL, policy);
        // Content-named files have compressed copies: a shared cache must key on the encoding.
        if immutable && !headers.contains_key(header::VARY) {
            headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
    }
    response
}

/// `/pkg/NAME.HASH.EXT`, HASH the 16 hex digits `build-front.sh` writes.
fn is_content_named(path: &str) -> bool {
    let Some(file) = path.strip_prefix("/pkg/") else {
        return false;
    };
    let mut parts = file.rsplit('.');
    let (Some(_extension), Some(hash), Some(_name)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::is_content_named;

    #[test]
    fn only_hashed_bundle_files_are_content_named() {
        assert!(is_content_named(
            "/pkg/seckill_console.0123456789abcdef.wasm"
        ));
        assert!(is_content_named(
            "/pkg/seckill_console.0123456789abcdef.css"
        ));
        assert!(!is_content_named("/pkg/seckill_console.wasm"));
        assert!(!is_content_named("/pkg/seckill_console_bg.wasm"));
        assert!(!is_content_named("/pkg/hash.txt"));
        assert!(!is_content_named(
            "/pkg/seckill_console.0123456789abcdeg.js"
        ));
        assert!(!is_content_named("/favicon.svg"));
        assert!(!is_content_named("/other/x.0123456789abcdef.js"));
    }
}
