//! The sale page's rules, free of I/O: the version a publish gets, the content-hashed names
//! of its assets and their entity tags, and which button script the server's clock calls for.

use sha2::{Digest, Sha256};

/// The version a publish gets: 1 for the first, one more than the current one after.
pub fn next_version(current: Option<i64>) -> i64 {
    current.map_or(1, |version| version + 1)
}

/// Hex digits of the content hash kept in an asset's name: 48 bits tell apart every version
/// an activity will ever have.
const NAME_HASH_DIGITS: usize = 12;

fn sha256_hex(content: &[u8]) -> String {
    hex::encode(Sha256::digest(content))
}

/// `sale.3f2a9c01b7de.js`: the name changes whenever the content does, so a CDN and a
/// browser may keep a named asset for ever.
pub fn hashed_name(stem: &str, extension: &str, content: &[u8]) -> String {
    let hash = sha256_hex(content);
    format!("{stem}.{}.{extension}", &hash[..NAME_HASH_DIGITS])
}

/// The strong entity tag of a response body, quoted as HTTP wants it.
pub fn entity_tag(content: &[u8]) -> String {
    format!("\"{}\"", &sha256_hex(content)[..16])
}

/// Whether an `If-None-Match` header value names `tag` (or is `*`): the client's copy is
/// current and a 304 will do. Weak tags compare by their opaque part, as the header allows.
pub fn matches_tag(if_none_match: &str, tag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == tag
    })
}

/// What the button script tells the page, by the server's clock alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ButtonPhase {
    /// Before the start: the button stays grey.
    Upcoming,
    /// From the start to the end: `canStart` is true.
    Open,
    /// At or after the end.
    Ended,
}

impl ButtonPhase {
    pub const ALL: [ButtonPhase; 3] =
        [ButtonPhase::Upcoming, ButtonPhase::Open, ButtonPhase::Ended];

    pub fn as_str(self) -> &'static str {
        match self {
            ButtonPhase::Upcoming => "upcoming",
            ButtonPhase::Open => "open",
            ButtonPhase::Ended => "ended",
        }
    }

    pub fn can_start(self) -> bool {
        self == ButtonPhase::Open
    }

    /// The phase at `now_ms` of a sale from `starts_at_ms` (included) to `ends_at_ms`
    /// (excluded), the same bounds the buy path checks.
    pub fn at(now_ms: i64, starts_at_ms: i64, ends_at_ms: i64) -> Self {
        if now_ms < starts_at_ms {
            ButtonPhase::Upcoming
        } else if now_ms < ends_at_ms {
            ButtonPhase::Open
        } else {
            ButtonPhase::Ended
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_start_at_one_and_grow_by_one() {
        assert_eq!(next_version(None), 1);
        assert_eq!(next_version(Some(1)), 2);
        assert_eq!(next_version(Some(41)), 42);
    }

    #[test]
    fn an_asset_name_changes_with_its_content_only() {
        let first = hashed_name("sale", "js", b"let a = 1;");
        assert_eq!(first, hashed_name("sale", "js", b"let a = 1;"));
        assert_ne!(first, hashed_name("sale", "js", b"let a = 2;"));
        assert!(
            first.starts_with("sale.") && first.ends_with(".js"),
            "{first}"
        );
        assert_eq!(first.len(), "sale.".len() + NAME_HASH_DIGITS + ".js".len());
        // The hash is the content's, not the stem's: another stem keeps the same digits.
        assert_eq!(
            hashed_name("sale", "css", b"x")[5..17],
            hashed_name("sale", "js", b"x")[5..17]
        );
    }

    #[test]
    fn if_none_match_names_the_current_tag() {
        let tag = entity_tag(b"page");
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() == 18);
        assert_ne!(tag, entity_tag(b"page 2"));
        assert!(matches_tag(&tag, &tag));
        assert!(matches_tag(&format!("\"old\", W/{tag}"), &tag));
        assert!(matches_tag("*", &tag));
        assert!(!matches_tag("\"old\"", &tag));
        assert!(!matches_tag("", &tag));
    }

    #[test]
    fn the_button_starts_at_the_start_and_stops_at_the_end() {
        let (starts, ends) = (10_000, 20_000);
        assert_eq!(ButtonPhase::at(9_999, starts, ends), ButtonPhase::Upcoming);
        assert_eq!(ButtonPhase::at(10_000, starts, ends), ButtonPhase::Open);
        assert_eq!(ButtonPhase::at(19_999, starts, ends), ButtonPhase::Open);
        assert_eq!(ButtonPhase::at(20_000, starts, ends), ButtonPhase::Ended);
        let can_start: Vec<bool> = ButtonPhase::ALL.iter().map(|p| p.can_start()).collect();
        assert_eq!(can_start, [false, true, false]);
    }
}
