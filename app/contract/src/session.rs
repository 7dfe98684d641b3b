//! The console's session cookie: its name, and how its token is found among a request's
//! `Cookie` headers. The console sets it at login; the server reads it on every console call
//! and on every admin request that carries no bearer token.

/// The cookie that carries a console session's token.
pub const SESSION_COOKIE: &str = "seckill_session";

/// The session token among the values of a request's `Cookie` headers, if any.
pub fn session_token<'a>(cookie_headers: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    cookie_headers
        .into_iter()
        .flat_map(|header| header.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_session_cookie_only() {
        assert_eq!(session_token(["theme=dark; seckill_session_x=1"]), None);
        assert_eq!(
            session_token([
                "theme=dark; seckill_session_x=1",
                "a=b; seckill_session=abc123"
            ]),
            Some("abc123")
        );
    }
}
