//! Which keys need a second person (four eyes): `policy/approval` in etcd, a JSON list of
//! key patterns, e.g. `["switches/deduction", "switches/entry*"]`, where `*` stands for any
//! run of characters. It is read from etcd at each flip, which talks to etcd anyway, so the
//! CLI (which watches nothing) and every instance apply the policy etcd holds at that
//! moment, never a copy that lags behind it.

use etcd_client::Client;

use crate::control::layout::Layout;
use base::etcd::{EtcdCall, EtcdLink};

/// The approval policy in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApprovalPolicy {
    /// Keys matching one of the patterns need approval; none when empty or absent.
    Patterns(Vec<String>),
    /// The policy in etcd is malformed: every key needs approval until it is fixed (an
    /// admin's emergency flip still works), rather than none.
    Unreadable(String),
}

impl ApprovalPolicy {
    /// The policy from the raw value of `policy/approval` (absent: no key needs approval).
    pub(crate) fn parse(raw: Option<&[u8]>) -> Self {
        let Some(raw) = raw else {
            return Self::Patterns(Vec::new());
        };
        match serde_json::from_slice::<Vec<String>>(raw) {
            Ok(patterns) => Self::Patterns(patterns),
            Err(error) => Self::Unreadable(error.to_string()),
        }
    }

    /// Whether a flip of `path` needs a second person.
    pub(crate) fn needs_approval(&self, path: &str) -> bool {
        match self {
            Self::Patterns(patterns) => patterns.iter().any(|pattern| matches(pattern, path)),
            Self::Unreadable(_) => true,
        }
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The policy as etcd holds it now.
pub(crate) async fn read(
    etcd: &EtcdLink,
    client: &mut Client,
    layout: &Layout,
) -> Result<ApprovalPolicy, etcd_client::Error> {
    let response = etcd
        .timed(EtcdCall::Get, client.get(layout.approval_policy(), None))
        .await?;
    let policy = ApprovalPolicy::parse(response.kvs().first().map(|kv| kv.value()));
    if let ApprovalPolicy::Unreadable(error) = &policy {
        tracing::warn!(
            error,
            "policy/approval is malformed: every key needs approval"
        );
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> ApprovalPolicy {
        ApprovalPolicy::parse(Some(json.as_bytes()))
    }

    #[test]
    fn patterns_match_whole_paths_with_stars_for_any_run() {
        let policy = policy(r#"["switches/deduction", "switches/entry*", "limits/*_window"]"#);
        assert!(policy.needs_approval("switches/deduction"));
        assert!(!policy.needs_approval("switches/deduction/x"));
        assert!(policy.needs_approval("switches/entry"));
        assert!(policy.needs_approval("switches/entry/42"));
        assert!(policy.needs_approval("limits/per_user_per_window"));
        assert!(!policy.needs_approval("limits/rate_window_s"));
        assert!(!policy.needs_approval("switches/challenge"));
    }

    #[test]
    fn no_policy_needs_nothing_and_a_malformed_one_needs_everything() {
        assert!(!ApprovalPolicy::parse(None).needs_approval("switches/deduction"));
        assert!(!policy("[]").needs_approval("switches/deduction"));
        assert!(policy("switches/*").needs_approval("limits/max_in_flight"));
        assert!(policy(r#"{"keys": 1}"#).needs_approval("switches/async"));
    }
}
