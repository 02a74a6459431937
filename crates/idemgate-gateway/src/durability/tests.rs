use idemgate_core::{Durability, DurabilityLevel, MemoryStore};

use super::*;

fn local() -> Durability {
    Durability::new(
        DurabilityLevel::Local,
        "commits stay on this host (synchronous_standby_names is empty)",
    )
    .with_fact("synchronous_commit", "on")
    .with_fact("synchronous_standby_names", "")
}

#[test]
fn the_line_is_the_stores_own_sentence() {
    // The store says what a failure costs the keys (PostgreSQL's sentences below replicated
    // name the failover: idemgate-postgres's durability tests); the line adds nothing to it.
    let line = describe("postgres", &local());
    assert_eq!(
        line,
        "the postgres store is local: commits stay on this host (synchronous_standby_names is empty)"
    );
    let line = describe("sqlite", &local());
    assert!(!line.contains("failover"), "{line}");
}

#[test]
fn a_refusal_is_said_with_the_reason() {
    let mut d = Durability::new(DurabilityLevel::Replicated, "commits wait for 1 standby");
    d.refusing_new_keys = Some("no synchronous standby is streaming".into());
    let line = describe("postgres", &d);
    assert!(
        line.ends_with(
            "new keys get 503 (replays are still served): no synchronous standby is streaming"
        ),
        "{line}"
    );
}

#[test]
fn only_level_summary_and_refusal_count_as_a_change() {
    let a = local();
    let mut b = local().with_fact("standby_lag_bytes", "42");
    assert!(!changed(&a, &b), "facts alone are not a change");
    b.refusing_new_keys = Some("x".into());
    assert!(changed(&a, &b));
    let mut c = local();
    c.level = DurabilityLevel::Replicated;
    assert!(changed(&a, &c));
    let mut d = local();
    d.summary.push('!');
    assert!(changed(&a, &d));
}

#[test]
fn the_report_lists_every_fact() {
    let text = report("postgres", &local());
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("durability: the postgres store is local"),
        "{text}"
    );
    assert_eq!(lines[1], "  synchronous_commit = \"on\"");
    assert_eq!(lines[2], "  synchronous_standby_names = \"\"");
}

#[tokio::test]
async fn one_read_is_kept_for_readyz() {
    let state = DurabilityState::default();
    state.set(&Durability {
        refusing_new_keys: Some("before".into()),
        ..local()
    });
    assert_eq!(state.refusing_new_keys().as_deref(), Some("before"));
    // The memory store refuses nothing: the read clears the refusal, and `None` reads once.
    watch(
        &MemoryStore::new(),
        None,
        false,
        &state,
        std::future::pending(),
    )
    .await;
    assert_eq!(state.refusing_new_keys(), None);
}
