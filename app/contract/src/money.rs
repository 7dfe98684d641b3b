//! Amounts in cents, as people read and type them.

/// Formats cents as a decimal amount, `1250` → `"12.50"`.
pub fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Parses a decimal amount typed by a person (`"12"`, `"12.5"`, `"12.50"`) into cents.
pub fn parse_cents(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let invalid = || format!("`{text}` is not an amount like 12.50");
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    if fraction.len() > 2 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let whole: i64 = whole.parse().map_err(|_| invalid())?;
    let fraction: i64 = format!("{fraction:0<2}").parse().map_err(|_| invalid())?;
    whole
        .checked_mul(100)
        .and_then(|cents| cents.checked_add(fraction))
        .ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_round_trip_through_text() {
        assert_eq!(parse_cents("12.50"), Ok(1250));
        assert_eq!(parse_cents("12.5"), Ok(1250));
        assert_eq!(parse_cents(" 7 "), Ok(700));
        assert_eq!(parse_cents("0.05"), Ok(5));
        assert_eq!(format_cents(1250), "12.50");
        assert_eq!(format_cents(5), "0.05");
    }

    #[test]
    fn malformed_amounts_are_rejected() {
        for text in [
            "",
            "-1",
            "1.234",
            "abc",
            "1.x",
            ".5",
            "99999999999999999999",
        ] {
            assert!(parse_cents(text).is_err(), "{text} should be rejected");
        }
    }
}
