//! The lottery's decisions as plain functions: the seed's commitment, the draw's order, how
//! many win, what a code looks like, and a registrant's status from what Redis holds of him.

use hmac::{Hmac, Mac};
use rand::{distributions::Alphanumeric, Rng};
use sha2::{Digest, Sha256};

/// The public commitment to a draw's seed: its SHA-256 in lowercase hex, shown from the
/// moment the activity becomes a lottery, so the seed revealed after the draw can be checked
/// against it (nobody could have picked a seed after seeing who registered).
pub fn commitment(seed: &[u8]) -> String {
    hex::encode(Sha256::digest(seed))
}

/// A registrant's ticket: HMAC-SHA256 keyed by the seed over his user id in decimal ASCII.
fn ticket(seed: &[u8], user_id: i64) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(seed).expect("HMAC takes a key of any length");
    mac.update(user_id.to_string().as_bytes());
    mac.finalize().into_bytes().into()
}

/// The draw's order (docs/lottery.md): registrants by ticket ascending as bytes, ties by user id.
/// Anyone holding the seed and the list gets the same order (docs/lottery.md has the script).
pub fn draw_order(seed: &[u8], registrants: &[i64]) -> Vec<i64> {
    let mut keyed: Vec<([u8; 32], i64)> = registrants
        .iter()
        .map(|user| (ticket(seed, *user), *user))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, user)| user).collect()
}

/// How many of the order win: each winner's whole limit is reserved for him.
pub fn winners(stock: i64, per_user_limit: i64) -> usize {
    usize::try_from(stock / per_user_limit.max(1)).unwrap_or(0)
}

/// Letters and digits of a new code: 20 of 62 symbols, about 119 bits, not guessable.
const CODE_LEN: usize = 20;

pub fn new_code() -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(CODE_LEN)
        .map(char::from)
        .collect()
}

/// Whether a code sent by a buyer could be one of ours: letters and digits, 1 to 64 of them
/// (the buy script splits a stored code on spaces; nothing else may get in).
pub fn well_formed_code(code: &str) -> bool {
    (1..=64).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A registrant's status (docs/lottery.md): the wire's, which the buyer events carry too.
pub use contract::RegistrationStatus as Status;

/// A status as PostgreSQL's `lottery_entries.status` and the JSON spell it.
pub fn status_name(status: Status) -> &'static str {
    match status {
        Status::Registered => "registered",
        Status::Won => "won",
        Status::Waitlisted => "waitlisted",
        Status::Bought => "bought",
        Status::Expired => "expired",
        Status::Lost => "lost",
        Status::Revoked => "revoked",
    }
}

/// A code as Redis keeps it: `"<code> <valid from ms> <expires ms> <units>"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub code: String,
    pub valid_from_ms: i64,
    pub expires_ms: i64,
    pub units: i64,
}

impl Grant {
    pub fn parse(stored: &str) -> Option<Grant> {
        let mut parts = stored.split(' ');
        let grant = Grant {
            code: parts.next()?.to_owned(),
            valid_from_ms: parts.next()?.parse().ok()?,
            expires_ms: parts.next()?.parse().ok()?,
            units: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(grant)
    }

    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.code, self.valid_from_ms, self.expires_ms, self.units
        )
    }
}

/// What Redis holds of one registrant of one item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// His entry in the registration list: `r`, his rank once drawn, `x` revoked.
    pub entry: Option<String>,
    pub grant: Option<String>,
    /// His code has bought.
    pub used: bool,
    /// Ranks that have had their turn (absent until the draw's result is in Redis).
    pub turns: Option<i64>,
    /// How many the draw made winners.
    pub winners: Option<i64>,
    /// Ranks of the buyers revoked after the draw.
    pub gone_ranks: Vec<i64>,
}

/// Where a registrant stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    pub status: Status,
    pub grant: Option<Grant>,
    /// 1 for the next in line: revoked buyers ahead of him, whose turn will pass them by,
    /// are not counted.
    pub waitlist_position: Option<i64>,
    /// While he waits: the turns the waitlist has had since the draw (each a code handed to
    /// the next, or a revoked buyer passed by).
    pub turns_passed: Option<i64>,
}

/// His standing at `now_ms`, with the sale `ended` or not; `None` if he never registered.
pub fn standing(held: &Held, now_ms: i64, ended: bool) -> Option<Standing> {
    let plain = |status| Standing {
        status,
        grant: None,
        waitlist_position: None,
        turns_passed: None,
    };
    let entry = held.entry.as_deref()?;
    let rank = match entry {
        "x" => return Some(plain(Status::Revoked)),
        "r" => return Some(plain(Status::Registered)),
        rank => rank.parse::<i64>().ok()?,
    };
    let Some(turns) = held.turns else {
        return Some(plain(Status::Registered));
    };
    if let Some(grant) = held.grant.as_deref().and_then(Grant::parse) {
        let status = if held.used {
            Status::Bought
        } else if ended || now_ms > grant.expires_ms {
            Status::Expired
        } else {
            Status::Won
        };
        return Some(Standing {
            status,
            grant: Some(grant),
            waitlist_position: None,
            turns_passed: None,
        });
    }
    if rank > turns && !ended {
        let revoked_ahead = held
            .gone_ranks
            .iter()
            .filter(|gone| **gone > turns && **gone < rank)
            .count();
        return Some(Standing {
            status: Status::Waitlisted,
            grant: None,
            waitlist_position: Some(rank - turns - revoked_ahead as i64),
            turns_passed: held.winners.map(|winners| (turns - winners).max(0)),
        });
    }
    Some(plain(Status::Lost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_follows_the_tickets_and_is_the_same_for_anyone() {
        let seed = [7u8; 32];
        let order = draw_order(&seed, &[5, 1, 3, 2, 4]);
        assert_eq!(draw_order(&seed, &[1, 2, 3, 4, 5]), order);
        let tickets: Vec<_> = order.iter().map(|user| ticket(&seed, *user)).collect();
        assert!(tickets.windows(2).all(|pair| pair[0] < pair[1]));
        assert_ne!(draw_order(&[8u8; 32], &[1, 2, 3, 4, 5]), order);
    }

    #[test]
    fn winners_get_whole_limits() {
        assert_eq!(winners(100, 1), 100);
        assert_eq!(winners(100, 3), 33);
        assert_eq!(winners(2, 3), 0);
    }

    #[test]
    fn codes_are_well_formed_and_grants_read_back() {
        let code = new_code();
        assert!(well_formed_code(&code));
        assert!(!well_formed_code("a b"));
        assert!(!well_formed_code(""));
        let grant = Grant {
            code,
            valid_from_ms: 1,
            expires_ms: 2,
            units: 3,
        };
        assert_eq!(Grant::parse(&grant.encode()), Some(grant));
        assert_eq!(Grant::parse("x 1 2"), None);
    }

    #[test]
    fn standing_follows_the_entry_the_code_and_the_turns() {
        let grant = Some("C 100 200 1".to_owned());
        let held = |entry: &str, grant: Option<String>, used, turns| Held {
            entry: Some(entry.into()),
            grant,
            used,
            turns,
            winners: Some(2),
            gone_ranks: Vec::new(),
        };
        let status = |held: Held, now, ended| standing(&held, now, ended).map(|s| s.status);
        assert_eq!(standing(&Held::default(), 0, false), None);
        assert_eq!(
            status(held("r", None, false, None), 0, false),
            Some(Status::Registered)
        );
        assert_eq!(
            status(held("x", grant.clone(), false, Some(1)), 150, false),
            Some(Status::Revoked)
        );
        assert_eq!(
            status(held("1", grant.clone(), false, Some(1)), 150, false),
            Some(Status::Won)
        );
        assert_eq!(
            status(held("1", grant.clone(), true, Some(1)), 150, false),
            Some(Status::Bought)
        );
        assert_eq!(
            status(held("1", grant.clone(), false, Some(1)), 201, false),
            Some(Status::Expired)
        );
        assert_eq!(
            status(held("1", grant, false, Some(1)), 150, true),
            Some(Status::Expired)
        );
        let waiting = standing(&held("5", None, false, Some(2)), 0, false).unwrap();
        assert_eq!(
            (
                waiting.status,
                waiting.waitlist_position,
                waiting.turns_passed
            ),
            (Status::Waitlisted, Some(3), Some(0))
        );
        // Ranks 4 and 7 revoked, 3 had its turn: rank 4 is passed by, 7 is behind him.
        let behind_a_revoked = Held {
            gone_ranks: vec![4, 7],
            ..held("6", None, false, Some(3))
        };
        let waiting = standing(&behind_a_revoked, 0, false).unwrap();
        assert_eq!(
            (waiting.waitlist_position, waiting.turns_passed),
            (Some(2), Some(1))
        );
        assert_eq!(
            status(held("5", None, false, Some(2)), 0, true),
            Some(Status::Lost)
        );
    }
}
