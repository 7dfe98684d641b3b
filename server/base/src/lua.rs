//! Every Redis script of `lua/`, loaded once into the binary, with the name the metrics
//! know it by. A script runs as `EVALSHA <its SHA-1>`; the Redis call timings find the
//! script's name from that hash, so a new script is listed here and nowhere else. Pre-warm
//! loads them all ahead of a sale; the readiness check asks Redis whether it holds them.

use redis::Script;
use std::{collections::HashMap, sync::LazyLock};

use crate::redis::RedisStore;

macro_rules! scripts {
    ($($(#[$doc:meta])* $static:ident => $file:literal),* $(,)?) => {
        $(
            $(#[$doc])*
            pub static $static: LazyLock<Script> = LazyLock::new(|| {
                Script::new(include_str!(concat!("../../../lua/", $file, ".lua")))
            });
        )*

        /// Every script's file name (without `.lua`), in the order above.
        pub const NAMES: &[&str] = &[$($file),*];

        /// Every script with its file name, in the order above.
        pub fn all() -> Vec<(&'static str, &'static Script)> {
            vec![$(($file, &*$static)),*]
        }

        /// Each script's file name by its SHA-1 (as lowercase hex, as EVALSHA sends it).
        static BY_HASH: LazyLock<HashMap<&'static str, &'static str>> = LazyLock::new(|| {
            HashMap::from([$(($static.get_hash(), $file)),*])
        });
    };
}

scripts! {
    /// One hit in a fixed-window counter (console logins).
    FIXED_WINDOW => "fixed_window",
    /// Sets or tests the Bloom filter's bits.
    BLOOM => "bloom",
    /// A whole buy: stored answer, rate windows, claim and deduction, leaving a marker.
    BUY => "buy",
    /// Frees a request id refused after its claim, if it still holds its own marker.
    RELEASE_CLAIM => "release_claim",
    /// Gives back a deduction whose pre-order will never commit, once.
    RELEASE_DEDUCTION => "release_deduction",
    /// Gives a cancelled order's units or seats back once per order id.
    RESTORE_ORDER => "restore_order",
    /// Renews a re-derivation's fence, only for the run that raised it.
    FENCE_RENEW => "fence_renew",
    /// Lowers a re-derivation's fence, only for the run that raised it.
    FENCE_LOWER => "fence_lower",
    /// Swaps a re-derivation's staged keys in, only while its run holds the fence.
    REDERIVE_COMMIT => "rederive_commit",
    /// One buyer's registration for a lottery item, counted in his address's window.
    LOTTERY_REGISTER => "lottery_register",
    /// Hands the units no live code holds to the next on a lottery item's waitlist.
    LOTTERY_ADVANCE => "lottery_advance",
    /// Ends one buyer's part in a lottery item: registration revoked, unused code deleted.
    LOTTERY_REVOKE => "lottery_revoke",
    /// Records a buyer event in his log and announces it to every instance.
    BUYER_EVENT => "buyer_event",
}

/// The script whose SHA-1 is `hash`, if it is one of ours.
pub fn name_of(hash: &[u8]) -> Option<&'static str> {
    std::str::from_utf8(hash)
        .ok()
        .and_then(|hash| BY_HASH.get(hash).copied())
}

impl RedisStore {
    /// Loads every script (SCRIPT LOAD), so the first buys after a Redis restart or a
    /// SCRIPT FLUSH do not each pay a NOSCRIPT round trip and a body upload.
    pub async fn load_scripts(&self) -> redis::RedisResult<()> {
        let mut connection = self.connection();
        for (_, script) in all() {
            script.prepare_invoke().load_async(&mut connection).await?;
        }
        Ok(())
    }

    /// The scripts Redis does not hold (SCRIPT EXISTS), by file name.
    pub async fn missing_scripts(&self) -> redis::RedisResult<Vec<&'static str>> {
        let scripts = all();
        let hashes: Vec<&str> = scripts
            .iter()
            .map(|(_, script)| script.get_hash())
            .collect();
        let loaded: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(&hashes)
            .query_async(&mut self.connection())
            .await?;
        Ok(scripts
            .iter()
            .zip(loaded)
            .filter(|(_, loaded)| !loaded)
            .map(|((name, _), _)| *name)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_lua_folder_is_listed_and_found_by_its_hash() {
        let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lua");
        let mut files: Vec<String> = std::fs::read_dir(folder)
            .expect("lua/")
            .filter_map(|entry| {
                let name = entry.expect("entry").file_name().into_string().ok()?;
                name.strip_suffix(".lua").map(str::to_owned)
            })
            .collect();
        files.sort();
        let mut listed: Vec<&str> = NAMES.to_vec();
        listed.sort_unstable();
        assert_eq!(files, listed);
        assert_eq!(name_of(BUY.get_hash().as_bytes()), Some("buy"));
        assert_eq!(name_of(b"not a hash"), None);
    }
}
