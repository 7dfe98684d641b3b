//! Who sends what: the buyers with their pre-minted bearer tokens, the items under load,
//! and the deterministic mapping from a request's sequence number to a buyer and an item.
//!
//! Request `k` goes to buyer `k mod users`, so buyers take turns; buyer `b` always wants
//! item `b mod items`. The plan's limit caps the run at `users x retries-per-user` requests.

use secrecy::SecretString;

/// One simulated buyer.
pub struct Buyer {
    /// The whole `Authorization` header value, `Bearer <JWT>`.
    pub authorization: String,
    /// The `X-Forwarded-For` a balancer in front would add for this buyer, when the run asks
    /// for one: an address of its own in 10.0.0.0/8 (see [`forwarded_address`]), or the one
    /// address the run gives every buyer.
    pub forwarded_for: Option<String>,
}

/// `--forwarded-for`'s value asking for an address per buyer.
pub const PER_BUYER: &str = "per-buyer";

/// The address a buyer reaches the balancer from, made up from its user id: distinct for
/// 16 million buyers.
pub fn forwarded_address(user_id: i64) -> String {
    let [.., a, b, c] = user_id.to_be_bytes();
    format!("10.{a}.{b}.{c}")
}

/// The fixed shape of a run, shared by every worker.
pub struct Plan {
    pub activity_id: i64,
    pub items: Vec<i64>,
    pub quantity: u32,
    buyers: Vec<Buyer>,
    limit: u64,
}

/// What request `k` of the run is: its buyer (see [`Plan::buyer`]) and item.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    buyer: usize,
    pub item_id: i64,
}

/// Everything [`Plan::new`] needs besides the tokens' secret.
pub struct Shape {
    pub activity_id: i64,
    pub items: Vec<i64>,
    pub quantity: u32,
    pub first_user: i64,
    pub users: u64,
    pub retries_per_user: u64,
    pub request_cap: u64,
    /// Every request carries an `X-Forwarded-For`: `per-buyer` (his own) or one address.
    pub forwarded: Option<String>,
}

impl Plan {
    /// Mints one token per buyer up front, so the timed phase does no signing.
    pub fn new(shape: Shape, secret: &SecretString, ttl: chrono::Duration) -> anyhow::Result<Self> {
        anyhow::ensure!(!shape.items.is_empty(), "no items to buy");
        anyhow::ensure!(shape.users > 0, "no buyers");
        let buyers = (0..shape.users)
            .map(|offset| {
                let user_id = shape.first_user + i64::try_from(offset)?;
                let token = sale::identity::buyer_token::mint(secret, user_id, ttl)?;
                Ok(Buyer {
                    authorization: format!("Bearer {token}"),
                    forwarded_for: shape.forwarded.as_deref().map(|forwarded| match forwarded {
                        PER_BUYER => forwarded_address(user_id),
                        address => address.to_owned(),
                    }),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let limit = shape
            .request_cap
            .min(shape.users.saturating_mul(shape.retries_per_user));
        Ok(Self {
            activity_id: shape.activity_id,
            items: shape.items,
            quantity: shape.quantity,
            buyers,
            limit,
        })
    }

    /// Most requests this run sends.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn users(&self) -> usize {
        self.buyers.len()
    }

    /// Request `k`, or `None` once the run has sent all it may.
    pub fn slot(&self, k: u64) -> Option<Slot> {
        if k >= self.limit {
            return None;
        }
        let buyer = usize::try_from(k % self.buyers.len() as u64).ok()?;
        Some(Slot {
            buyer,
            item_id: self.items[buyer % self.items.len()],
        })
    }

    /// The buyer who sends `slot`.
    pub fn buyer(&self, slot: Slot) -> &Buyer {
        &self.buyers[slot.buyer]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sale::identity::buyer_token::BuyerTokens;

    fn plan(users: u64, retries_per_user: u64, request_cap: u64) -> Plan {
        let shape = Shape {
            activity_id: 1,
            items: vec![10, 20],
            quantity: 1,
            first_user: 100,
            users,
            retries_per_user,
            request_cap,
            forwarded: None,
        };
        Plan::new(shape, &"s".into(), chrono::Duration::hours(1)).expect("plan")
    }

    /// The user id a buyer's token speaks for, as the server's verifier reads it.
    fn user_of(buyer: &Buyer) -> i64 {
        BuyerTokens::new(&"s".into())
            .buyer(Some(&buyer.authorization))
            .expect("a valid buyer token")
    }

    #[test]
    fn buyers_take_turns_and_keep_their_item() {
        let plan = plan(3, 2, 100);
        let slots: Vec<(i64, i64)> = (0..)
            .map_while(|k| plan.slot(k))
            .map(|slot| (user_of(plan.buyer(slot)), slot.item_id))
            .collect();
        let turns = [(100, 10), (101, 20), (102, 10)];
        assert_eq!(slots, [turns, turns].concat());
    }

    #[test]
    fn the_request_cap_can_end_the_run_before_the_budget() {
        assert_eq!(plan(3, 2, 4).limit(), 4);
        assert_eq!(plan(3, 2, u64::MAX).limit(), 6);
    }

    #[test]
    fn forwarded_addresses_are_distinct_per_buyer() {
        assert_eq!(forwarded_address(1), "10.0.0.1");
        assert_eq!(forwarded_address(70_000), "10.1.17.112");
        assert_ne!(forwarded_address(256), forwarded_address(1));
    }
}
