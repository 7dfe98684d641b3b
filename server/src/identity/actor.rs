//! The admin user behind a request, and which merchant's rows it sees. What its role may do
//! is the permission table's business (`crate::admin::authorize`).

use contract::Role;

/// The authenticated admin user behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    pub user_id: i64,
    pub username: String,
    pub role: Role,
    /// Set exactly for merchants.
    pub merchant_id: Option<i64>,
}

impl Actor {
    /// The merchant whose rows this actor may read; `None` means every merchant's.
    pub fn visible_merchant(&self) -> Option<i64> {
        match self.role {
            Role::Merchant => self.merchant_id,
            Role::Ops | Role::Sre | Role::Admin => None,
        }
    }

    /// Whether a row owned by `owner` is visible to this actor. Rows that are not are
    /// answered as absent (404), so a merchant cannot probe another merchant's ids.
    pub fn sees(&self, owner: i64) -> bool {
        self.visible_merchant().is_none_or(|mine| mine == owner)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn actor(role: Role, merchant_id: Option<i64>) -> Actor {
        Actor {
            user_id: 1,
            username: "u".into(),
            role,
            merchant_id,
        }
    }

    #[test]
    fn merchants_see_only_their_own_rows() {
        let merchant = actor(Role::Merchant, Some(7));
        assert!(merchant.sees(7));
        assert!(!merchant.sees(8));
        for role in [Role::Sre, Role::Ops, Role::Admin] {
            assert!(actor(role, None).sees(123));
        }
    }
}
