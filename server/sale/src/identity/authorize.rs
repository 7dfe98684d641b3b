//! The one gate of every admin route and console call: [`authorize`] asks the permission table
//! (`Role::may`, in the contract crate, so the console shows exactly the controls the server
//! allows) and answers 403 before the use case reads or writes anything.

use contract::Actor;
use contract::Permission;

use base::error::{ApiError, ApiResult};

/// Refuses `actor` unless its role may do `permission`. Which rows a merchant sees is a
/// separate question, answered by [`Actor::sees`] once the row is known.
pub fn authorize(actor: &Actor, permission: Permission) -> ApiResult<()> {
    if actor.role.may(permission) {
        Ok(())
    } else {
        Err(ApiError::Forbidden)
    }
}
