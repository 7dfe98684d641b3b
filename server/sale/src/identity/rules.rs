//! The rules of logging in, as plain functions: how long a username and a password may be,
//! and which throttle counters one attempt counts against. Counters are keyed by what an
//! attacker cannot inflate: a client address (an IPv6 client by its /64, the block one host
//! is usually given) and a digest of the username, so every key has a fixed bound whatever
//! was typed.

use sha2::{Digest, Sha256};
use std::net::IpAddr;

use base::client_address;

/// Longest username a user can be created with, and so the longest a login looks up.
pub const MAX_USERNAME_BYTES: usize = 64;
/// Longest password accepted: argon2 reads all of it, so a huge one costs CPU for nothing.
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// Largest body the login route reads: the form with both fields at their longest,
/// percent-encoded three bytes a byte, and room for the field names.
pub const MAX_LOGIN_BODY_BYTES: usize = 3 * (MAX_USERNAME_BYTES + MAX_PASSWORD_BYTES) + 256;
/// Longest throttle subject [`attempt_subjects`] makes: `ip:` and an IPv6 address (at most
/// 39 characters), then `|user:` and 32 hex digits.
pub const MAX_SUBJECT_BYTES: usize = 3 + 39 + 6 + 32;

/// Why a username or password is refused before anything is looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TooLong {
    #[error("the username is longer than {MAX_USERNAME_BYTES} bytes")]
    Username,
    #[error("the password is longer than {MAX_PASSWORD_BYTES} bytes")]
    Password,
}

impl TooLong {
    /// The error code the login route answers with.
    pub fn code(self) -> &'static str {
        match self {
            TooLong::Username => "USERNAME_TOO_LONG",
            TooLong::Password => "PASSWORD_TOO_LONG",
        }
    }
}

pub fn check_username(username: &str) -> Result<(), TooLong> {
    if username.len() > MAX_USERNAME_BYTES {
        return Err(TooLong::Username);
    }
    Ok(())
}

pub fn check_login_input(username: &str, password: &str) -> Result<(), TooLong> {
    check_username(username)?;
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(TooLong::Password);
    }
    Ok(())
}

/// The two counters one login attempt counts against: the client address alone (spraying
/// many accounts from one place), and the (username, address) pair (guessing one account's
/// password). There is deliberately no counter of the username alone: anyone could spend it
/// and keep the real user out. Without a known address (a caller inside the process) both
/// fall back to one shared "unknown" address.
pub fn attempt_subjects(username: &str, client: Option<IpAddr>) -> [String; 2] {
    let address = client.map_or_else(|| "unknown".to_owned(), throttled_address);
    let user = Sha256::digest(username.as_bytes());
    let user = hex::encode(&user[..16]);
    [format!("ip:{address}"), format!("ip:{address}|user:{user}")]
}

/// The address an attempt is counted under: the one windows and hot keys count
/// (`client_address::counted`: IPv6 by its /64), a network spelled with its length.
fn throttled_address(ip: IpAddr) -> String {
    match client_address::counted(ip) {
        IpAddr::V6(block) => format!("{block}/64"),
        v4 => v4.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_and_passwords_are_capped() {
        assert_eq!(
            check_login_input(&"u".repeat(64), &"p".repeat(1024)),
            Ok(())
        );
        assert_eq!(
            check_login_input(&"u".repeat(65), "pw"),
            Err(TooLong::Username)
        );
        assert_eq!(
            check_login_input("ops", &"p".repeat(1025)),
            Err(TooLong::Password)
        );
        // Bytes, not characters: four-byte characters count four.
        assert_eq!(check_username(&"😀".repeat(17)), Err(TooLong::Username));
    }

    #[test]
    fn subjects_are_bounded_whatever_the_username() {
        let widest: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        for username in ["", "ops", &"x".repeat(900_000)] {
            for client in [None, Some(widest), Some("203.0.113.9".parse().unwrap())] {
                for subject in attempt_subjects(username, client) {
                    assert!(subject.len() <= MAX_SUBJECT_BYTES, "{subject}");
                }
            }
        }
    }

    #[test]
    fn the_pair_names_user_and_address_and_the_address_alone_is_shared() {
        let a = Some("203.0.113.9".parse().unwrap());
        let b = Some("198.51.100.7".parse().unwrap());
        let [ip_a, ops_a] = attempt_subjects("ops", a);
        let [ip_a2, sre_a] = attempt_subjects("sre", a);
        let [ip_b, ops_b] = attempt_subjects("ops", b);
        assert_eq!(ip_a, ip_a2);
        assert_ne!(ip_a, ip_b);
        assert_ne!(ops_a, sre_a);
        assert_ne!(ops_a, ops_b);
        assert!(ops_a.starts_with(&ip_a), "{ops_a}");
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_slash_64() {
        let one = Some("2001:db8:1:2::1".parse().unwrap());
        let other = Some("2001:db8:1:2:ffff::9".parse().unwrap());
        let elsewhere = Some("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(attempt_subjects("ops", one), attempt_subjects("ops", other));
        assert_ne!(
            attempt_subjects("ops", one),
            attempt_subjects("ops", elsewhere)
        );
        assert_eq!(attempt_subjects("ops", one)[0], "ip:2001:db8:1:2::/64");
        let mapped = Some("::ffff:203.0.113.9".parse().unwrap());
        assert_eq!(attempt_subjects("ops", mapped)[0], "ip:203.0.113.9");
    }
}
