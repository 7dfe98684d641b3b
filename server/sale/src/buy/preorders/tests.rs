//! Unit tests of `preorders`: its rules and steps without the stores.

use super::*;

#[test]
fn verdicts_read_as_the_function_writes_them() {
    let (id, other) = (Uuid::new_v4(), Uuid::new_v4());
    let read = |verdict, existing| Verdict::read(id, verdict, existing).expect(verdict);
    assert_eq!(read("written", None), Verdict::Written);
    assert_eq!(
        read("not_enough", None),
        Verdict::Refused(Refusal::NotEnough)
    );
    assert_eq!(
        read("unknown_seat", None),
        Verdict::Refused(Refusal::UnknownSeat)
    );
    assert_eq!(read("voided", None), Verdict::Voided);
    assert_eq!(
        read("duplicate", Some(other)),
        Verdict::Duplicate(Some(other))
    );
    assert_eq!(read("duplicate", None), Verdict::Duplicate(None));
    // An earlier attempt at this batch committed the member: it is written.
    assert_eq!(read("duplicate", Some(id)), Verdict::Written);
    assert!(Verdict::read(id, "maybe", None).is_err());
}

/// A wait no test sits through: a batch that closes within the test closed for
/// another reason than its wait.
const FOREVER: Duration = Duration::from_secs(3600);

fn counted(heading: &Arc<Heading>) -> OnTheWay {
    heading.requests.fetch_add(1, Ordering::AcqRel);
    OnTheWay(heading.clone())
}

#[tokio::test]
async fn a_batch_closes_with_what_was_sent_once_no_request_is_on_its_way() {
    let heading = Arc::new(Heading::default());
    let (queue, mut incoming) = mpsc::channel(16);
    let late = counted(&heading);
    for member in [2, 3] {
        queue.send(member).await.expect("sent");
    }
    drop(late);
    let batch = gather(1, &mut incoming, &heading, 16, FOREVER).await;
    assert_eq!(batch, [1, 2, 3]);
    // Only up to the batch's size.
    for member in [4, 5, 6] {
        queue.send(member).await.expect("sent");
    }
    assert_eq!(gather(0, &mut incoming, &heading, 2, FOREVER).await, [0, 4]);
}

#[tokio::test]
async fn a_batch_waits_for_the_requests_on_their_way() {
    let heading = Arc::new(Heading::default());
    let (queue, mut incoming) = mpsc::channel(16);
    let coming = [counted(&heading), counted(&heading)];
    let gathering = {
        let heading = heading.clone();
        tokio::spawn(async move { gather(1, &mut incoming, &heading, 16, FOREVER).await })
    };
    for (member, on_the_way) in [2, 3].into_iter().zip(coming) {
        queue.send(member).await.expect("sent");
        tokio::task::yield_now().await;
        drop(on_the_way);
    }
    assert_eq!(gathering.await.expect("gathered"), [1, 2, 3]);
}

fn order(activity_id: i64, recorded: bool) -> PreOrder {
    PreOrder {
        id: Uuid::new_v4(),
        activity_id,
        item_id: 1,
        user_id: 1,
        quantity: 1,
        amount_cents: 100,
        request_id: "r".into(),
        seats: Vec::new(),
        reservation: Reservation::Redis { per_user_limit: 1 },
        recorded,
    }
}

#[test]
fn a_batch_shares_one_outbox_row_per_activity_and_outbox_state() {
    let batch = [
        order(1, false),
        order(2, false),
        order(1, false),
        order(1, true),
        order(2, false),
        order(1, true),
    ];
    let rows = outbox_rows(&batch);
    assert_eq!(rows.len(), batch.len());
    assert_eq!((rows[0], rows[3]), (rows[2], rows[5]));
    assert_eq!(rows[1], rows[4]);
    let distinct: std::collections::HashSet<_> = rows.iter().collect();
    assert_eq!(distinct.len(), 3, "{rows:?}");
    assert_ne!(
        outbox_rows(&batch[..1]),
        rows[..1],
        "a new row for every statement"
    );
}
