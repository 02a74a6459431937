use std::sync::Arc;
use std::time::Duration;

use idemgate_core::events::{EventKind, KeyEvent, KeyId};
use idemgate_core::testing::unique_key;

use super::{EventHub, KEPT};

fn event(n: &str) -> KeyEvent {
    KeyEvent {
        key: KeyId::of(&unique_key(n)),
        kind: EventKind::Written,
    }
}

fn ns(name: &str) -> Arc<str> {
    name.into()
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn a_wait_gets_its_namespaces_events_in_order_and_no_others() {
    let hub = EventHub::default();
    hub.publish(&ns("alpha"), &event("before"));
    let start = hub.wait("alpha", None, SECOND).await.unwrap();
    let start_b = hub.wait("beta", None, SECOND).await.unwrap();
    assert!(
        start.events.is_empty() && !start.missed,
        "a start answers at once"
    );
    let (a1, b, a2) = (event("a1"), event("b"), event("a2"));
    hub.publish(&ns("alpha"), &a1);
    hub.publish(&ns("beta"), &b);
    hub.publish(&ns("alpha"), &a2);
    let got = hub
        .wait("alpha", Some(&start.cursor), SECOND)
        .await
        .unwrap();
    assert_eq!(got.events, [a1.encode(), a2.encode()]);
    assert!(!got.missed);
    let got_b = hub
        .wait("beta", Some(&start_b.cursor), SECOND)
        .await
        .unwrap();
    assert_eq!(got_b.events, [b.encode()]);
    // Nothing new: the wait ends at its time, empty, at the same place.
    let idle = hub.wait("alpha", Some(&got.cursor), SECOND).await.unwrap();
    assert!(idle.events.is_empty() && !idle.missed);
    assert_eq!(idle.cursor, got.cursor);
}

#[tokio::test(start_paused = true)]
async fn a_wait_ends_with_the_first_event_of_its_namespace() {
    let hub = Arc::new(EventHub::default());
    let start = hub.wait("alpha", None, SECOND).await.unwrap();
    let waiting = {
        let hub = hub.clone();
        tokio::spawn(async move {
            hub.wait("alpha", Some(&start.cursor), Duration::from_secs(20))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(SECOND).await;
    hub.publish(&ns("beta"), &event("other"));
    tokio::time::sleep(SECOND).await;
    assert!(
        !waiting.is_finished(),
        "another namespace's event ends no wait"
    );
    let mine = event("mine");
    hub.publish(&ns("alpha"), &mine);
    let got = tokio::time::timeout(SECOND, waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.events, [mine.encode()]);
}

#[tokio::test(start_paused = true)]
async fn cursors_of_another_process_a_later_number_or_lost_events_read_as_missed() {
    let hub = EventHub::default();
    let other = EventHub::default();
    let start = hub.wait("alpha", None, SECOND).await.unwrap();
    let beta = hub.wait("beta", None, SECOND).await.unwrap();
    for cursor in [
        other.wait("alpha", None, SECOND).await.unwrap().cursor,
        format!("{}99", &start.cursor[..start.cursor.len() - 1]),
    ] {
        let got = hub.wait("alpha", Some(&cursor), SECOND).await.unwrap();
        assert!(got.missed, "{cursor}");
        assert_eq!(got.cursor, start.cursor, "starts again at the end");
    }
    for i in 0..=KEPT {
        hub.publish(&ns("alpha"), &event(&i.to_string()));
    }
    let got = hub
        .wait("alpha", Some(&start.cursor), SECOND)
        .await
        .unwrap();
    assert!(got.missed, "more events came than the hub keeps");
    assert_eq!(got.events.len(), 256, "the oldest kept, at most 256");
    // Another namespace's flood neither shows in beta's cursor nor makes it miss.
    let quiet = hub.wait("beta", Some(&beta.cursor), SECOND).await.unwrap();
    assert!(!quiet.missed && quiet.events.is_empty());
    assert_eq!(quiet.cursor, beta.cursor);
}

#[tokio::test(start_paused = true)]
async fn what_is_not_a_cursor_is_refused() {
    let hub = EventHub::default();
    let start = hub.wait("alpha", None, SECOND).await.unwrap();
    let (epoch, _) = start.cursor.split_once('-').unwrap();
    for bad in [
        String::new(),
        "x".repeat(100_000),
        "-1".into(),
        "é-0".into(),
        format!("+{epoch}-0"),
        format!("{}-0", epoch.to_uppercase()),
        format!("{epoch}-+0"),
        format!("0{epoch}-0"),
        format!("{epoch}-00"),
        format!("{epoch}-99999999999999999999999"),
    ] {
        if bad.len() < 50 && bad == start.cursor {
            continue;
        }
        assert!(
            hub.wait("alpha", Some(&bad), SECOND).await.is_err(),
            "{bad:.40}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn close_ends_the_waits_at_once() {
    let hub = Arc::new(EventHub::default());
    let start = hub.wait("alpha", None, SECOND).await.unwrap();
    let waiting = {
        let hub = hub.clone();
        tokio::spawn(async move {
            hub.wait("alpha", Some(&start.cursor), Duration::from_secs(20))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(SECOND).await;
    hub.close();
    let got = tokio::time::timeout(SECOND, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(got.events.is_empty());
}
