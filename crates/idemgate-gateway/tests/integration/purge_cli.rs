//! `idemgate purge` as a command: `--dry-run` deletes nothing on every store, a progress
//! bar only on a terminal, each error cause once.

use std::process::Command;
use std::time::Duration;

use idemgate_core::testing::unique_key;
use idemgate_core::GaugedStore;

use crate::purge::{record, Target};
use crate::support::run_idemgate;

fn idemgate(args: &[String]) -> (i32, String) {
    run_idemgate(args)
}

fn purge_args(target: &Target, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["purge".to_owned(), "--store".into(), target.url()];
    args.extend(target.flags());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `expired` records past their TTL and 3 live ones.
async fn seed(target: &Target, expired: usize) {
    let s = target.open().await;
    for _ in 0..expired {
        record(&s, &unique_key("alice"), Duration::from_millis(100), true).await;
    }
    for _ in 0..3 {
        record(&s, &unique_key("bob"), Duration::from_secs(3600), true).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// `--dry-run` counts and deletes nothing; the real run then deletes exactly those.
async fn dry_run_deletes_nothing(target: Target) {
    seed(&target, 9).await;
    let (code, text) = idemgate(&purge_args(&target, &["--dry-run", "--batch", "2"]));
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("dry run: 9 expired records would be purged"),
        "{text}"
    );
    let g = target.open().await.gauges().await.unwrap();
    assert_eq!((g.records(), g.expired), (12, Some(9)), "nothing deleted");
    let (code, text) = idemgate(&purge_args(&target, &["--batch", "2"]));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("purged 9 expired records"), "{text}");
    let g = target.open().await.gauges().await.unwrap();
    assert_eq!((g.records(), g.expired), (3, Some(0)));
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dry_run_deletes_nothing() {
    dry_run_deletes_nothing(Target::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dry_run_deletes_nothing() {
    let Some(t) = Target::postgres() else { return };
    dry_run_deletes_nothing(t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dry_run_says_redis_expires_records_itself() {
    let Some(t) = Target::redis() else { return };
    seed(&t, 4).await;
    let (code, text) = idemgate(&purge_args(&t, &["--dry-run"]));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("deletes each record itself"), "{text}");
    let g = t.open().await.gauges().await.unwrap();
    assert_eq!((g.records(), g.expired), (3, None));
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_bar_is_drawn_only_on_a_terminal() {
    let t = Target::sqlite();
    seed(&t, 6).await;
    // Piped: log lines, no bar.
    let (code, text) = idemgate(&purge_args(&t, &["--batch", "2"]));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("purge batch done"), "{text}");
    assert!(!text.contains("purging"), "no bar on a pipe: {text}");
    seed(&t, 6).await;
    // On a pseudo-terminal (util-linux `script`): the bar, no log lines.
    let Ok(out) = Command::new("script")
        .arg("-qec")
        .arg(format!(
            "{} {}",
            env!("CARGO_BIN_EXE_idemgate"),
            purge_args(&t, &["--batch", "2"]).join(" ")
        ))
        .arg("/dev/null")
        .env("TERM", "xterm")
        .env("RUST_LOG", "info")
        .output()
    else {
        println!("skipping the terminal half: `script` is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("purging"), "a bar on a terminal: {text}");
    assert!(text.contains("6/6 records"), "{text}");
    assert!(!text.contains("purge batch done"), "{text}");
    assert!(text.contains("purged 6 expired records"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_purge_reports_each_cause_once() {
    let Some(t) = Target::postgres() else { return };
    // The table was never created.
    let (code, text) = idemgate(&purge_args(&t, &[]));
    assert_eq!(code, 2, "{text}");
    assert_eq!(text.matches("does not exist").count(), 1, "{text}");
}

#[test]
fn flags_for_another_store_are_refused_by_name() {
    let t = Target::sqlite();
    let url = t.url();
    let args = |extra: &[&str]| {
        let mut a = vec!["purge".to_owned(), "--store".into(), url.clone()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let (code, text) = idemgate(&args(&["--key-prefix", "x:"]));
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--key-prefix"), "{text}");
    let (code, text) = idemgate(&args(&["--table", "other"]));
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--table"), "{text}");
    let (code, text) = idemgate(&args(&["--max-rate", "0"]));
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--max-rate"), "{text}");
}
