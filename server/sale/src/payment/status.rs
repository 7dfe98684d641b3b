//! The state of a trade at the payment center, as the store keeps it and callbacks report it
//! (the type is the contract's: the console shows it on an order's trades).

pub use contract::TradeStatus;

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
