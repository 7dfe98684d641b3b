//! Who may touch what. Roles come from `app::model::Role`; this module turns an actor
//! and a request into the merchant whose rows are read or written.

use app::model::Role;

/// The authenticated admin user behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    pub user_id: i64,
    pub username: String,
    pub role: Role,
    /// Set exactly for merchants.
    pub merchant_id: Option<i64>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    #[error("your role may not do this")]
    Forbidden,
    #[error("{0}")]
    Invalid(&'static str),
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

    /// The merchant a catalogue write lands on: a merchant always writes its own rows
    /// (a different `requested` id is refused); an admin must name the merchant.
    pub fn catalog_owner(&self, requested: Option<i64>) -> Result<i64, AccessError> {
        if !self.role.may_write_catalog() {
            return Err(AccessError::Forbidden);
        }
        match (self.role, self.merchant_id, requested) {
            (Role::Merchant, Some(own), None) => Ok(own),
            (Role::Merchant, Some(own), Some(other)) if other == own => Ok(own),
            (Role::Merchant, _, _) => Err(AccessError::Forbidden),
            (_, _, Some(merchant)) => Ok(merchant),
            (_, _, None) => Err(AccessError::Invalid("an admin must name the merchant_id")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(role: Role, merchant_id: Option<i64>) -> Actor {
        Actor {
            user_id: 1,
            username: "u".into(),
            role,
            merchant_id,
        }
    }

    #[test]
    fn merchants_see_and_write_only_their_own_rows() {
        let merchant = actor(Role::Merchant, Some(7));
        assert!(merchant.sees(7));
        assert!(!merchant.sees(8));
        assert_eq!(merchant.catalog_owner(None), Ok(7));
        assert_eq!(merchant.catalog_owner(Some(7)), Ok(7));
        assert_eq!(merchant.catalog_owner(Some(8)), Err(AccessError::Forbidden));
    }

    #[test]
    fn read_only_roles_cannot_write_the_catalogue() {
        for role in [Role::Sre, Role::Ops] {
            let reader = actor(role, None);
            assert!(reader.sees(123));
            assert_eq!(reader.catalog_owner(Some(1)), Err(AccessError::Forbidden));
        }
    }

    #[test]
    fn admins_write_for_the_merchant_they_name() {
        let admin = actor(Role::Admin, None);
        assert_eq!(admin.catalog_owner(Some(3)), Ok(3));
        assert!(matches!(
            admin.catalog_owner(None),
            Err(AccessError::Invalid(_))
        ));
    }
}
