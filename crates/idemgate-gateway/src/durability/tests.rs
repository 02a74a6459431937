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
fn postgres_without_a_synchronous_standby_says_a_failover_runs_keys_again() {
    let line = describe("postgres", &local());
    assert!(
        line.starts_with("the postgres store is local: commits stay"),
        "{line}"
    );
    assert!(line.contains("; a failover to a standby can lose the records it had not received, and their keys would run again"), "{line}");
    // What the store's sentence says already is not said twice.
    let alone = Durability::new(
        DurabilityLevel::Local,
        "losing this server loses the records, and their keys would run again",
    );
    let line = describe("postgres", &alone);
    assert!(
        line.ends_with("run again; so would a failover to a standby that had not received them"),
        "{line}"
    );
    let lagging = Durability::new(
        DurabilityLevel::Local,
        "a failover can lose records, and their keys would run again",
    );
    assert!(describe("postgres", &lagging)
        .ends_with(": a failover can lose records, and their keys would run again"));
    // SQLite has no failover: its summary says it all.
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
