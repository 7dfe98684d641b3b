//! The reason every operator action gives (a flip, a requeue, a replay): required, because
//! the audit log must say why, and bounded, because it is kept forever. One rule, one pair of
//! error codes, whichever action asks.

use base::error::{ApiError, ApiResult};

/// Longest reason kept in the audit.
pub const MAX_REASON_CHARS: usize = 500;

/// The reason, trimmed; 400 `REASON_REQUIRED` when it is empty, 400 `REASON_TOO_LONG` when
/// it is longer than [`MAX_REASON_CHARS`] characters, 400 `REASON_INVALID` when it holds a
/// control character other than a line break or a tab: a person does not type one, and
/// PostgreSQL's text cannot hold the NUL a fuzzer sends (it failed the audit's insert).
pub fn audited_reason(reason: &str) -> ApiResult<&str> {
    let reason = reason.trim();
    if reason.is_empty() {
        Err(ApiError::Invalid {
            code: "REASON_REQUIRED",
            message: "say why: this action needs a reason".into(),
        })
    } else if reason.chars().count() > MAX_REASON_CHARS {
        Err(ApiError::Invalid {
            code: "REASON_TOO_LONG",
            message: format!("the reason is limited to {MAX_REASON_CHARS} characters"),
        })
    } else if reason
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        Err(ApiError::Invalid {
            code: "REASON_INVALID",
            message: "the reason may hold no control characters but line breaks and tabs".into(),
        })
    } else {
        Ok(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_required_and_bounded() {
        assert_eq!(
            audited_reason("  drain after the outage ").ok(),
            Some("drain after the outage")
        );
        let code = |reason: &str| audited_reason(reason).err().map(|error| error.code());
        assert_eq!(code("   "), Some("REASON_REQUIRED"));
        assert_eq!(
            code(&"x".repeat(MAX_REASON_CHARS + 1)),
            Some("REASON_TOO_LONG")
        );
        assert!(audited_reason(&"é".repeat(MAX_REASON_CHARS)).is_ok());
        assert_eq!(code("why\u{0}not"), Some("REASON_INVALID"));
        assert_eq!(code("why\u{1b}[31m"), Some("REASON_INVALID"));
        assert!(audited_reason("first line\nsecond\tline").is_ok());
    }
}
