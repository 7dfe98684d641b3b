//! Unit tests of `funnel`: its rules and steps without the stores.

use super::*;
use crate::buy::stock_scripts::in_flight_marker;

#[test]
fn a_successful_buy_is_answered_with_its_order_as_json() {
    let order = Uuid::now_v7();
    let body: serde_json::Value = serde_json::from_slice(&ordered(order).body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({ "order_id": order, "status": "PRE_CREATED" })
    );
}

#[test]
fn stored_answers_decode_to_the_same_bytes() {
    let mut answer = Answer::refusal(Outcome::RateLimited, "slow down");
    answer.retry_after_s = Some(1);
    assert_eq!(Answer::decode(&answer.encode()), Some(answer));
    let ok = Answer::json(
        200,
        serde_json::json!({"order_id": "x", "status": "PRE_CREATED"}),
    );
    assert_eq!(Answer::decode(&ok.encode()), Some(ok));
    assert_eq!(Answer::decode(&in_flight_marker(Uuid::new_v4())), None);
}

#[test]
fn a_refusal_serialised_once_is_the_refusal_serialised_now() {
    for (index, outcome) in Outcome::ALL.into_iter().enumerate() {
        assert_eq!(outcome as usize, index, "{outcome:?} out of place");
        assert_eq!(
            Answer::refusal(outcome, outcome.message()),
            Answer::serialised(outcome, outcome.message())
        );
    }
    let special = Answer::refusal(Outcome::SoldOut, "a chosen seat is taken");
    let body: serde_json::Value = serde_json::from_slice(&special.body).expect("json");
    assert_eq!(body["code"], "SOLD_OUT");
    assert_eq!(body["message"], "a chosen seat is taken");
}

#[test]
fn an_undocumented_script_code_answers_503_and_is_counted() {
    let counts = StageCounts(StageCounters::new(Metrics::new()));
    let order = PreOrder {
        id: Uuid::new_v4(),
        activity_id: 1,
        item_id: 2,
        user_id: 3,
        quantity: 1,
        amount_cents: 100,
        request_id: "r-1".into(),
        seats: Vec::new(),
        reservation: Reservation::Redis { per_user_limit: 1 },
        recorded: false,
    };
    let answer = counts.unknown_answer("buy", UnknownAnswer(-7), &order);
    assert_eq!(answer.status, 503);
    let body: serde_json::Value = serde_json::from_slice(&answer.body).expect("json");
    assert_eq!(body["code"], "DEGRADED");
    let text = counts.0.metrics().render();
    for counted in [
        r#"seckill_stock_script_unknown_answers_total{script="buy"} 1"#,
        r#"seckill_funnel_requests_total{outcome="DEGRADED",stage="deduction"} 1"#,
    ] {
        assert!(text.contains(counted), "{counted} missing from:\n{text}");
    }
}
