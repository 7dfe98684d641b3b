//! Ids of the platform's rows as distinct types, so an item id can never be passed where an
//! activity id or a buyer's user id is expected. On the wire each is its plain number.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id!(
    /// A flash-sale activity.
    ActivityId
);
id!(
    /// A merchant's item (an activity offers items).
    ItemId
);
id!(
    /// A buyer, as the `sub` claim of the buyer token names him.
    UserId
);

/// One item of one activity: the unit stock is counted in, and what its Redis keys name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SaleItem {
    pub activity: ActivityId,
    pub item: ItemId,
}

impl SaleItem {
    pub fn new(activity_id: i64, item_id: i64) -> Self {
        Self {
            activity: ActivityId(activity_id),
            item: ItemId(item_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_numbers_on_the_wire() {
        assert_eq!(serde_json::to_string(&ItemId(7)).expect("json"), "7");
        assert_eq!(
            serde_json::from_str::<ActivityId>("42").expect("json"),
            ActivityId(42)
        );
        assert_eq!(UserId(3).to_string(), "3");
    }
}
