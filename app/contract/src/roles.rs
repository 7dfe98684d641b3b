//! Admin roles and what each may do: the one permission table the server enforces on every
//! admin route and console call, and the console consults to show or hide controls.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What an admin user may do; enforced on the server for every route and server function.
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
    /// Write a switch or limit into etcd.
    FlipSwitch,
    /// Watch the operations side: dead letters, the outbox, the audit log. Merchants' view
    /// stops at their own catalogue and orders.
    WatchOperations,
    /// Act on the order pipeline during a sale: requeue dead letters, replay recorded orders.
    OperatePipeline,
}

impl Permission {
    pub const ALL: [Permission; 8] = [
        Permission::ReadCatalog,
        Permission::WriteCatalog,
        Permission::ReadOrders,
        Permission::Prewarm,
        Permission::ReadSwitches,
        Permission::FlipSwitch,
        Permission::WatchOperations,
        Permission::OperatePipeline,
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
            Permission::Prewarm | Permission::FlipSwitch | Permission::OperatePipeline => {
                &[Ops, Admin]
            }
            Permission::WatchOperations => &[Ops, Sre, Admin],
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

/// The signed-in console user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentUser {
    pub username: String,
    pub role: Role,
    pub merchant_id: Option<i64>,
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
        assert!(Role::Ops.may(OperatePipeline) && !Role::Sre.may(OperatePipeline));
        assert!(Role::Sre.may(WatchOperations) && !Role::Merchant.may(WatchOperations));
        for role in Role::ALL {
            assert!(role.may(ReadCatalog) && role.may(ReadOrders) && role.may(ReadSwitches));
            assert_eq!(role.may(Prewarm), matches!(role, Role::Ops | Role::Admin));
        }
    }
}
