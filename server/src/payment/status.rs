//! The state of a trade at the payment center, as the store keeps it and callbacks report it.

use serde::{Deserialize, Serialize};

/// State of a trade at the payment center.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TradeStatus {
    /// Started; the buyer's money has not arrived.
    Pending,
    Paid,
    /// Refused by the center, or closed unpaid before the order was cancelled.
    Failed,
}

impl TradeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Paid, Self::Failed]
            .into_iter()
            .find(|status| status.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trade_status_names_round_trip() {
        for status in [TradeStatus::Pending, TradeStatus::Paid, TradeStatus::Failed] {
            assert_eq!(TradeStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_string(&status).expect("json"),
                format!("\"{}\"", status.as_str())
            );
        }
        assert_eq!(TradeStatus::parse("PAID"), None);
    }
}
