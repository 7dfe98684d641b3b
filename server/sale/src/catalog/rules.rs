//! What a valid item and a valid activity are. The admin API and the console both pass
//! their input through these checks before anything is written.

use chrono::{DateTime, Utc};
use contract::{ActivityInput, ActivityKind, ItemInput, SaleMode, DEFAULT_CODE_TTL_S};
use std::collections::{HashMap, HashSet};

/// Upper bounds that keep one request from allocating the world.
pub const MAX_NAME_LEN: usize = 200;
pub const MAX_DESCRIPTION_LEN: usize = 10_000;
pub const MAX_PRICE_CENTS: i64 = 10_000_000_000;
pub const MAX_STOCK: i64 = 10_000_000;
pub const MAX_PER_USER_LIMIT: i64 = 1_000;
pub const MAX_ITEMS_PER_ACTIVITY: usize = 100;
pub const MAX_SEATS: usize = 100_000;
pub const PAY_TIMEOUT_RANGE_S: std::ops::RangeInclusive<i64> = 10..=86_400;
/// A lottery code lives at least a minute (time to read it and press the button) and at
/// most a day (beyond it the units it reserves sit idle while others wait for them).
pub const CODE_TTL_RANGE_S: std::ops::RangeInclusive<i64> = 60..=86_400;

/// The terms of a lottery activity (docs/lottery.md) as validated: a window that closes at or
/// before the sale starts, and a code lifetime in range. They exist together or not at all,
/// so a first-come activity has none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LotteryTerms {
    pub registration_opens_at: DateTime<Utc>,
    pub registration_closes_at: DateTime<Utc>,
    pub code_ttl_s: i64,
}

/// A rule the input breaks, worded for the person who typed it, with the code programs
/// read (`BAD_REQUEST` unless the rule has a code of its own). The words name each field by
/// the console form's label ("Sale price (yuan)", "Ends"), not by its JSON name: the merchant
/// reading them typed into the form; a program reads the code.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    pub code: &'static str,
    pub message: String,
}

fn invalid(message: impl Into<String>) -> Invalid {
    Invalid {
        code: "BAD_REQUEST",
        message: message.into(),
    }
}

impl From<Invalid> for base::error::ApiError {
    fn from(Invalid { code, message }: Invalid) -> Self {
        base::error::ApiError::Invalid { code, message }
    }
}

fn check_text(field: &str, value: &str, max: usize, required: bool) -> Result<(), Invalid> {
    if required && value.trim().is_empty() {
        return Err(invalid(format!("{field} must not be empty")));
    }
    if value.chars().count() > max {
        return Err(invalid(format!("{field} is longer than {max} characters")));
    }
    Ok(())
}

/// Prices are typed in yuan, so the bounds are told in yuan too.
fn check_price(field: &str, cents: i64) -> Result<(), Invalid> {
    if !(0..=MAX_PRICE_CENTS).contains(&cents) {
        return Err(invalid(format!(
            "{field} must be between 0.00 and {}",
            contract::format_cents(MAX_PRICE_CENTS)
        )));
    }
    Ok(())
}

pub fn validate_item(input: &ItemInput) -> Result<(), Invalid> {
    check_text("Name", &input.name, MAX_NAME_LEN, true)?;
    check_text(
        "Description",
        &input.description,
        MAX_DESCRIPTION_LEN,
        false,
    )?;
    check_price("Price (yuan)", input.price_cents)
}

/// A seat code as printed on a ticket: letters, digits and dashes, at most 16.
pub fn valid_seat_code(code: &str) -> bool {
    (1..=16).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// An activity as it may be written `now`: an activity entirely in the past could sell
/// nothing, yet it would be offered a pre-warm and a sale page.
pub fn validate_activity(input: &ActivityInput, now: DateTime<Utc>) -> Result<(), Invalid> {
    check_text("Title", &input.title, MAX_NAME_LEN, true)?;
    if input.ends_at <= input.starts_at {
        return Err(invalid("Ends must be after Starts"));
    }
    if input.ends_at <= now {
        return Err(Invalid {
            code: "ENDS_IN_THE_PAST",
            message: "Ends must be in the future: this activity would be over already".into(),
        });
    }
    if !PAY_TIMEOUT_RANGE_S.contains(&input.pay_timeout_s) {
        return Err(invalid(format!(
            "Pay within (s) must be between {} and {} seconds",
            PAY_TIMEOUT_RANGE_S.start(),
            PAY_TIMEOUT_RANGE_S.end()
        )));
    }
    if input.items.is_empty() {
        return Err(invalid("Items: an activity needs at least one item"));
    }
    if input.items.len() > MAX_ITEMS_PER_ACTIVITY {
        return Err(invalid(format!(
            "Items: at most {MAX_ITEMS_PER_ACTIVITY} per activity"
        )));
    }
    // Rows are named as the form numbers them, from 1.
    let mut seen = HashMap::new();
    for (index, item) in input.items.iter().enumerate() {
        let row = index + 1;
        if let Some(first) = seen.insert(item.item_id, row) {
            return Err(invalid(format!(
                "Item {row} is the same item as Item {first}: list each item once"
            )));
        }
        if !(1..=MAX_STOCK).contains(&item.stock) {
            return Err(invalid(format!(
                "Item {row}, Stock must be between 1 and {MAX_STOCK}"
            )));
        }
        if !(1..=MAX_PER_USER_LIMIT).contains(&item.per_user_limit) {
            return Err(invalid(format!(
                "Item {row}, Limit / user must be between 1 and {MAX_PER_USER_LIMIT}"
            )));
        }
        if item.per_user_limit > item.stock {
            return Err(invalid(format!(
                "Item {row}, Limit / user must not exceed its Stock"
            )));
        }
        check_price(&format!("Item {row}, Sale price (yuan)"), item.price_cents)?;
    }
    lottery_terms(input)?;
    match input.kind {
        ActivityKind::Standard if !input.seats.is_empty() => {
            Err(invalid("Seats: only a seated activity takes seats"))
        }
        ActivityKind::Standard => Ok(()),
        ActivityKind::Seated => validate_seats(input),
    }
}

/// The lottery terms of `input`: `None` for a first-come activity (which must name none of
/// them), the validated terms for a lottery.
pub fn lottery_terms(input: &ActivityInput) -> Result<Option<LotteryTerms>, Invalid> {
    let window = |message: &str| Invalid {
        code: "REGISTRATION_WINDOW_INVALID",
        message: message.into(),
    };
    let (opens, closes) = (input.registration_opens_at, input.registration_closes_at);
    match input.mode {
        SaleMode::FirstCome
            if opens.is_some() || closes.is_some() || input.code_ttl_s.is_some() =>
        {
            Err(invalid(
                "Registration opens, Registration closes and Code lifetime are for a lottery only",
            ))
        }
        SaleMode::FirstCome => Ok(None),
        SaleMode::Lottery => {
            if input.kind == ActivityKind::Seated {
                return Err(invalid("Mode: a lottery sells units, not seats"));
            }
            let (Some(opens), Some(closes)) = (opens, closes) else {
                return Err(window(
                    "Registration opens and Registration closes are required for a lottery",
                ));
            };
            if closes <= opens {
                return Err(window(
                    "Registration closes must be after Registration opens",
                ));
            }
            if closes > input.starts_at {
                return Err(window(
                    "Registration closes must be at or before Starts: the draw comes before the sale",
                ));
            }
            let code_ttl_s = input.code_ttl_s.unwrap_or(DEFAULT_CODE_TTL_S);
            if !CODE_TTL_RANGE_S.contains(&code_ttl_s) {
                return Err(Invalid {
                    code: "CODE_TTL_OUT_OF_RANGE",
                    message: format!(
                        "Code lifetime (s) must be between {} and {} seconds",
                        CODE_TTL_RANGE_S.start(),
                        CODE_TTL_RANGE_S.end()
                    ),
                });
            }
            Ok(Some(LotteryTerms {
                registration_opens_at: opens,
                registration_closes_at: closes,
                code_ttl_s,
            }))
        }
    }
}

/// A seated activity sells one ticket item whose stock is its seat count, each seat once.
fn validate_seats(input: &ActivityInput) -> Result<(), Invalid> {
    if input.items.len() != 1 {
        return Err(invalid(
            "Items: a seated activity sells exactly one item (the ticket)",
        ));
    }
    if input.seats.is_empty() || input.seats.len() > MAX_SEATS {
        return Err(invalid(format!(
            "Seats: a seated activity needs between 1 and {MAX_SEATS} seats"
        )));
    }
    let mut seen = HashSet::new();
    for seat in &input.seats {
        if !valid_seat_code(seat) {
            return Err(invalid(format!(
                "Seats: `{seat}` must be 1-16 letters, digits or dashes"
            )));
        }
        if !seen.insert(seat.as_str()) {
            return Err(invalid(format!("Seats: {seat} is listed twice")));
        }
    }
    let stock = input.items[0].stock;
    if usize::try_from(stock).ok() != Some(input.seats.len()) {
        return Err(invalid(format!(
            "Item 1, Stock ({stock}) must equal the number of Seats ({})",
            input.seats.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, Utc};
    use contract::ActivityItemInput;

    fn activity() -> ActivityInput {
        let start = Utc::now() + Duration::hours(1);
        ActivityInput {
            title: "Double 11".into(),
            starts_at: start,
            ends_at: start + Duration::hours(1),
            kind: ActivityKind::Standard,
            pay_timeout_s: 900,
            items: vec![ActivityItemInput {
                item_id: 1,
                stock: 100,
                per_user_limit: 2,
                price_cents: 999,
            }],
            seats: vec![],
            merchant_id: None,
            mode: SaleMode::FirstCome,
            registration_opens_at: None,
            registration_closes_at: None,
            code_ttl_s: None,
        }
    }

    fn lottery() -> ActivityInput {
        let mut input = activity();
        input.mode = SaleMode::Lottery;
        input.registration_opens_at = Some(input.starts_at - Duration::minutes(50));
        input.registration_closes_at = Some(input.starts_at - Duration::minutes(5));
        input
    }

    #[test]
    fn a_lottery_takes_its_window_and_a_default_code_lifetime() {
        let input = lottery();
        let terms = lottery_terms(&input).unwrap().unwrap();
        assert_eq!(terms.code_ttl_s, DEFAULT_CODE_TTL_S);
        assert_eq!(validate_activity(&input, Utc::now()), Ok(()));
        let mut closing_at_start = lottery();
        closing_at_start.registration_closes_at = Some(closing_at_start.starts_at);
        assert_eq!(validate_activity(&closing_at_start, Utc::now()), Ok(()));
    }

    #[test]
    fn lottery_rules_reject_what_they_should_with_their_codes() {
        type Breaker = Box<dyn Fn(&mut ActivityInput)>;
        let cases: Vec<(&str, &str, Breaker)> = vec![
            (
                "no window",
                "REGISTRATION_WINDOW_INVALID",
                Box::new(|a| a.registration_opens_at = None),
            ),
            (
                "closes after the start",
                "REGISTRATION_WINDOW_INVALID",
                Box::new(|a| a.registration_closes_at = Some(a.starts_at + Duration::seconds(1))),
            ),
            (
                "closes before it opens",
                "REGISTRATION_WINDOW_INVALID",
                Box::new(|a| a.registration_closes_at = a.registration_opens_at),
            ),
            (
                "code lives 59 s",
                "CODE_TTL_OUT_OF_RANGE",
                Box::new(|a| a.code_ttl_s = Some(59)),
            ),
            (
                "code lives a day and a second",
                "CODE_TTL_OUT_OF_RANGE",
                Box::new(|a| a.code_ttl_s = Some(86_401)),
            ),
            (
                "terms on first come",
                "BAD_REQUEST",
                Box::new(|a| a.mode = SaleMode::FirstCome),
            ),
            (
                "a seated lottery",
                "BAD_REQUEST",
                Box::new(|a| {
                    a.kind = ActivityKind::Seated;
                    a.items[0].stock = 1;
                    a.items[0].per_user_limit = 1;
                    a.seats = vec!["A1".into()];
                }),
            ),
        ];
        for (name, code, break_it) in cases {
            let mut input = lottery();
            break_it(&mut input);
            let refused = validate_activity(&input, Utc::now()).expect_err(name);
            assert_eq!(refused.code, code, "{name}");
        }
        let mut edges = lottery();
        for ttl in [60, 86_400] {
            edges.code_ttl_s = Some(ttl);
            assert_eq!(validate_activity(&edges, Utc::now()), Ok(()), "{ttl}");
        }
    }

    fn seated(seats: &[&str], stock: i64) -> ActivityInput {
        let mut input = activity();
        input.kind = ActivityKind::Seated;
        input.items[0].stock = stock;
        input.items[0].per_user_limit = 1;
        input.seats = seats.iter().map(|s| s.to_string()).collect();
        input
    }

    #[test]
    fn a_plain_activity_is_valid() {
        assert_eq!(validate_activity(&activity(), Utc::now()), Ok(()));
    }

    #[test]
    fn activity_rules_reject_what_they_should() {
        type Breaker = Box<dyn Fn(&mut ActivityInput)>;
        let cases: Vec<(&str, Breaker)> = vec![
            ("empty title", Box::new(|a| a.title = "  ".into())),
            ("ends before start", Box::new(|a| a.ends_at = a.starts_at)),
            (
                "entirely in the past",
                Box::new(|a| {
                    a.starts_at = Utc::now() - Duration::hours(2);
                    a.ends_at = Utc::now() - Duration::hours(1);
                }),
            ),
            ("pay timeout", Box::new(|a| a.pay_timeout_s = 0)),
            ("no items", Box::new(|a| a.items.clear())),
            ("zero stock", Box::new(|a| a.items[0].stock = 0)),
            ("huge stock", Box::new(|a| a.items[0].stock = MAX_STOCK + 1)),
            ("zero limit", Box::new(|a| a.items[0].per_user_limit = 0)),
            (
                "limit above stock",
                Box::new(|a| a.items[0].per_user_limit = 101),
            ),
            ("negative price", Box::new(|a| a.items[0].price_cents = -1)),
            (
                "duplicate item",
                Box::new(|a| a.items.push(a.items[0].clone())),
            ),
            (
                "seats on standard",
                Box::new(|a| a.seats = vec!["A1".into()]),
            ),
        ];
        for (name, break_it) in cases {
            let mut input = activity();
            break_it(&mut input);
            assert!(
                validate_activity(&input, Utc::now()).is_err(),
                "{name} should be rejected"
            );
        }
    }

    #[test]
    fn seated_activities_match_seats_and_stock() {
        assert_eq!(
            validate_activity(&seated(&["A1", "A2", "B-3"], 3), Utc::now()),
            Ok(())
        );
        assert!(validate_activity(&seated(&["A1", "A2"], 3), Utc::now()).is_err());
        assert!(validate_activity(&seated(&["A1", "A1"], 2), Utc::now()).is_err());
        assert!(validate_activity(&seated(&["A 1"], 1), Utc::now()).is_err());
        assert!(validate_activity(&seated(&[], 1), Utc::now()).is_err());
    }

    #[test]
    fn item_rules() {
        let item = ItemInput {
            name: "Phone".into(),
            description: String::new(),
            price_cents: 100,
            merchant_id: None,
        };
        assert_eq!(validate_item(&item), Ok(()));
        assert!(validate_item(&ItemInput {
            name: String::new(),
            ..item.clone()
        })
        .is_err());
        assert!(validate_item(&ItemInput {
            price_cents: -5,
            ..item.clone()
        })
        .is_err());
        assert!(validate_item(&ItemInput {
            name: "x".repeat(201),
            ..item
        })
        .is_err());
    }
}
