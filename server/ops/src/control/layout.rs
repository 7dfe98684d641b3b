//! Where things live under the etcd prefix, and the note the control plane
//! writes beside every value it sets.
//!
//! Values stay plain (`closed`, `42`) so scripts and `etcdctl` read them. The write's
//! time and author go into a side key `{prefix}/meta/writes/{path}`, written in the same
//! transaction as the value, so the note and the value share one revision. That gives
//! the propagation time of a flip (node apply time minus the note's time; both clocks are
//! wall clocks, so across hosts the figure includes their skew, NTP keeps it to about a
//! millisecond), and it tells the watchers which changes came through the control plane:
//! a value whose revision has no note beside it was written straight into etcd.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The prefix with one trailing slash: `/seckill/`. Watching `/seckill` without the
    /// slash would also match `/seckill-blue/...` of another deployment.
    root: String,
}

const NOTES: &str = "meta/writes/";
const NODES: &str = "nodes/";
const HOTKEYS: &str = "hotkeys/";
const LIFTED_HOTKEYS: &str = "lifted-hotkeys/";
const CHANGES: &str = "changes/";
const STAGED: &str = "staged/";
const POLICY: &str = "policy/";

impl Layout {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            root: format!("{}/", prefix.trim_end_matches('/')),
        }
    }

    /// Everything this deployment owns in etcd.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn prefix(&self) -> &str {
        self.root.trim_end_matches('/')
    }

    /// A full key from a path relative to the prefix.
    pub(crate) fn key(&self, path: &str) -> String {
        format!("{}{path}", self.root)
    }

    /// The path relative to the prefix, if the key is under it.
    pub(crate) fn relative<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.root.as_str())
    }

    pub(crate) fn note_key(&self, path: &str) -> String {
        self.key(&format!("{NOTES}{path}"))
    }

    /// The switch path a note path belongs to (`meta/writes/switches/entry` → `switches/entry`).
    pub(crate) fn noted_path(path: &str) -> Option<&str> {
        path.strip_prefix(NOTES)
    }

    pub(crate) fn nodes(&self) -> String {
        self.key(NODES)
    }

    pub(crate) fn node_key(&self, node_id: &str) -> String {
        self.key(&format!("{NODES}{node_id}"))
    }

    pub(crate) fn is_node_path(path: &str) -> bool {
        path.starts_with(NODES)
    }

    /// Where a hot key is published: `hotkeys/{kind}/{key}`.
    pub(crate) fn hotkey_key(&self, id: contract::HotKeyId) -> String {
        self.key(&format!("{HOTKEYS}{}", id.path()))
    }

    /// Where an operator's lift of a hot key is remembered, under a lease of the key's hold:
    /// `lifted-hotkeys/{kind}/{key}`, outside `hotkeys/`, so no instance takes it for a key
    /// in force, while the leader does not publish the key again as long as it is there.
    pub(crate) fn lifted_hotkey_key(&self, id: contract::HotKeyId) -> String {
        self.key(&format!("{LIFTED_HOTKEYS}{}", id.path()))
    }

    /// Every hot key.
    pub(crate) fn hotkeys(&self) -> String {
        self.key(HOTKEYS)
    }

    /// The `{kind}/{key}` of a path under `hotkeys/`.
    pub(crate) fn hotkey_path(path: &str) -> Option<&str> {
        path.strip_prefix(HOTKEYS)
    }

    /// Where the leader marks a step of a waiting change as written (`changes/{id}/{step}`),
    /// in the same transaction as the value: outside `switches/`, so no instance takes it
    /// for a switch, and a leader that finds it knows the step already landed.
    pub(crate) fn change_marker(&self, change_id: i64, step: &str) -> String {
        self.key(&format!("{CHANGES}{change_id}/{step}"))
    }

    /// Every marker of one change.
    pub(crate) fn change_markers(&self, change_id: i64) -> String {
        self.key(&format!("{CHANGES}{change_id}/"))
    }

    /// Where a value staged on some instances waits (`staged/{path}`, a
    /// [`contract::SwitchStage`]): outside `switches/`, so an instance it does not name
    /// never takes it for the key's value.
    pub(crate) fn staged_key(&self, path: &str) -> String {
        self.key(&format!("{STAGED}{path}"))
    }

    /// The switch path a stage belongs to (`staged/switches/entry` → `switches/entry`).
    pub(crate) fn staged_path(path: &str) -> Option<&str> {
        path.strip_prefix(STAGED)
    }

    /// How much worse a stage's share of 5xx buy answers may be than the other instances'
    /// before the leader aborts it (see `changes::stage_watch`).
    pub(crate) fn stage_abort_policy(&self) -> String {
        self.key(&format!("{POLICY}stage_abort"))
    }

    /// Whether a path holds a policy of change management (`policy/approval`,
    /// `policy/stage_abort`): written with `etcdctl`, audited as outside writes.
    pub(crate) fn is_policy_path(path: &str) -> bool {
        path.starts_with(POLICY)
    }

    /// The key patterns that need a second person's approval (see `control::policy`).
    pub(crate) fn approval_policy(&self) -> String {
        self.key(&format!("{POLICY}approval"))
    }

    /// The etcd election's name; candidates' keys are created beneath it.
    pub(crate) fn election(&self) -> String {
        self.key("election/leader")
    }
}

/// Written beside a value set through the control plane (API, console, CLI).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WriteNote {
    pub(crate) actor: String,
    pub(crate) source: contract::Source,
    pub(crate) reason: String,
    /// Wall-clock microseconds since the epoch, just before the write was sent.
    pub(crate) written_at_us: i64,
}

/// Wall-clock microseconds since the epoch.
pub(crate) fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sit_under_the_prefix_with_one_slash() {
        for prefix in ["/seckill", "/seckill/"] {
            let layout = Layout::new(prefix);
            assert_eq!(layout.root(), "/seckill/");
            assert_eq!(layout.prefix(), "/seckill");
            assert_eq!(layout.key("switches/entry"), "/seckill/switches/entry");
            assert_eq!(
                layout.note_key("switches/entry"),
                "/seckill/meta/writes/switches/entry"
            );
            assert_eq!(layout.node_key("n1"), "/seckill/nodes/n1");
            assert_eq!(layout.election(), "/seckill/election/leader");
            assert_eq!(
                layout.hotkey_key(contract::HotKeyId::User(7)),
                "/seckill/hotkeys/user/7"
            );
        }
    }

    #[test]
    fn only_keys_under_the_prefix_are_ours() {
        let layout = Layout::new("/seckill");
        assert_eq!(
            layout.relative("/seckill/limits/rate_window_s"),
            Some("limits/rate_window_s")
        );
        assert_eq!(layout.relative("/seckill-blue/switches/entry"), None);
        assert_eq!(
            Layout::noted_path("meta/writes/switches/entry/4"),
            Some("switches/entry/4")
        );
        assert!(Layout::is_node_path("nodes/a"));
        assert!(!Layout::is_node_path("switches/entry"));
    }
}
