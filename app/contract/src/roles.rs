//! Admin roles and what each may do: the one permission table the server enforces on every
//! admin route and console call, and the console consults to show or hide controls.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What an admin user may do; enforced on the server for every route and server function.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Registers its own items and activities.
    Merchant,
    /// Pre-warms, flips switches, drains dead letters.
    Ops,
    /// Reads what ops sees; changes nothing.
    Sre,
    /// Everything ops may do, and every merchant's catalogue.
    Admin,
}

/// Something an admin route or console call does, as the permission table knows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read items and activities (merchants: their own).
    ReadCatalog,
    /// Create and edit items and activities: their merchant, or an admin on its behalf.
    WriteCatalog,
    /// Read orders (merchants: those of their own activities).
    ReadOrders,
    /// Load an activity's stock, buyer records and Bloom filter keys into Redis.
    Prewarm,
    /// Read the switch board: values, revisions, which instance applied what.
    ReadSwitches,
    /// Write a switch or limit into etcd; approve or reject another user's change to a key
    /// that needs four eyes.
    FlipSwitch,
    /// Flip a key that needs four eyes at once, without the second person (flagged in the
    /// audit).
    EmergencyFlip,
    /// Watch the operations side: dead letters, the outbox, the audit log. Merchants' view
    /// stops at their own catalogue and orders.
    WatchOperations,
    /// Act on the order pipeline during a sale: requeue dead letters, replay recorded orders,
    /// retry outbox rows the relay gave up on.
    OperatePipeline,
    /// Run a reconciliation report and read runs and the stock ledger of every activity.
    Reconcile,
    /// Run a reconciliation that repairs what it finds.
    RepairStock,
    /// Render an activity's static sale page and serve it (merchants: their own activities).
    PublishSalePage,
    /// Add and remove hot keys by hand (reading them is `WatchOperations`).
    ManageHotKeys,
    /// Start a rehearsal of an activity: a shadow copy under the built-in load generator
    /// (reading rehearsals is `WatchOperations`).
    Rehearse,
    /// Mark a recorded run as an activity's baseline (reading runs is `WatchOperations`).
    MarkBaseline,
    /// End a buyer's part in a lottery (his registration and live code; reading the draw is
    /// `WatchOperations`).
    RevokeRegistration,
}

impl Permission {
    pub const ALL: [Permission; 16] = [
        Permission::ReadCatalog,
        Permission::WriteCatalog,
        Permission::ReadOrders,
        Permission::Prewarm,
        Permission::ReadSwitches,
        Permission::FlipSwitch,
        Permission::EmergencyFlip,
        Permission::WatchOperations,
        Permission::OperatePipeline,
        Permission::Reconcile,
        Permission::RepairStock,
        Permission::PublishSalePage,
        Permission::ManageHotKeys,
        Permission::Rehearse,
        Permission::MarkBaseline,
        Permission::RevokeRegistration,
    ];
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Merchant, Role::Ops, Role::Sre, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Merchant => "merchant",
            Role::Ops => "ops",
            Role::Sre => "sre",
            Role::Admin => "admin",
        }
    }

    /// Whether this role may do `permission`: the one permission table. Merchants are
    /// further scoped to their own rows by the server, whatever the permission.
    pub fn may(self, permission: Permission) -> bool {
        use Role::*;
        let allowed: &[Role] = match permission {
            Permission::ReadCatalog | Permission::ReadOrders | Permission::ReadSwitches => {
                &Role::ALL
            }
            Permission::WriteCatalog => &[Merchant, Admin],
            Permission::EmergencyFlip => &[Admin],
            Permission::Prewarm
            | Permission::FlipSwitch
            | Permission::OperatePipeline
            | Permission::RepairStock
            | Permission::ManageHotKeys
            | Permission::Rehearse
            | Permission::MarkBaseline
            | Permission::RevokeRegistration => &[Ops, Admin],
            Permission::WatchOperations | Permission::Reconcile => &[Ops, Sre, Admin],
            Permission::PublishSalePage => &[Merchant, Ops, Admin],
        };
        allowed.contains(&self)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| format!("unknown role `{s}` (expected merchant, ops, sre or admin)"))
    }
}

/// The authenticated admin user behind a request: resolved once from its session or API
/// token, then handed to every use case, which asks the permission table what it may do.
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

/// The signed-in console user.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentUser {
    pub username: String,
    pub role: Role,
    pub merchant_id: Option<i64>,
}

impl From<&Actor> for CurrentUser {
    fn from(actor: &Actor) -> Self {
        CurrentUser {
            username: actor.username.clone(),
            role: actor.role,
            merchant_id: actor.merchant_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_from_their_names_only() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn the_permission_table() {
        use Permission::*;
        assert!(Role::Merchant.may(WriteCatalog));
        assert!(!Role::Sre.may(WriteCatalog));
        assert!(!Role::Ops.may(WriteCatalog));
        assert!(Role::Ops.may(FlipSwitch) && Role::Admin.may(FlipSwitch));
        assert!(!Role::Sre.may(FlipSwitch) && !Role::Merchant.may(FlipSwitch));
        assert!(Role::Admin.may(EmergencyFlip) && !Role::Ops.may(EmergencyFlip));
        assert!(Role::Ops.may(OperatePipeline) && !Role::Sre.may(OperatePipeline));
        assert!(Role::Sre.may(WatchOperations) && !Role::Merchant.may(WatchOperations));
        assert!(Role::Sre.may(Reconcile) && !Role::Sre.may(RepairStock));
        assert!(Role::Ops.may(RepairStock) && !Role::Merchant.may(Reconcile));
        assert!(Role::Merchant.may(PublishSalePage) && Role::Ops.may(PublishSalePage));
        assert!(Role::Admin.may(PublishSalePage) && !Role::Sre.may(PublishSalePage));
        assert!(Role::Ops.may(Rehearse) && Role::Admin.may(Rehearse));
        assert!(!Role::Sre.may(Rehearse) && !Role::Merchant.may(Rehearse));
        for role in Role::ALL {
            assert!(role.may(ReadCatalog) && role.may(ReadOrders) && role.may(ReadSwitches));
            assert_eq!(role.may(Prewarm), matches!(role, Role::Ops | Role::Admin));
        }
    }

    fn actor(role: Role, merchant_id: Option<i64>) -> Actor {
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
