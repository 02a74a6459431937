//! The forward journal's keys: refused on a store that is not PostgreSQL, a window below
//! 1 s and a directory, each naming its key; passed to the serving commands' store options
//! only; restart-only.

use std::time::Duration;

use idemgate_postgres::ForwardJournalOptions;

use super::*;

fn errors(store: &str, keys: &str) -> Vec<String> {
    let text = format!("upstream = \"http://a:1\"\nstore = \"{store}\"\n{keys}");
    Config::from_toml(&text)
        .unwrap()
        .validate()
        .err()
        .unwrap_or_default()
}

fn named(errs: &[String], key: &str) -> bool {
    errs.iter().any(|e| e.starts_with(&format!("{key}:")))
}

fn validated(store: &str, keys: &str) -> Validated {
    let text = format!("upstream = \"http://a:1\"\nstore = \"{store}\"\n{keys}");
    Config::from_toml(&text).unwrap().validate().unwrap()
}

const ALL_THREE: &str = "forward_journal_file = \"/var/lib/idemgate/journal.db\"\n\
                         forward_journal_window = \"5m\"\nfailover_grace = \"30s\"\n";

#[test]
fn the_journal_is_postgresql_only() {
    assert!(errors("postgres://app@db/pay", ALL_THREE).is_empty());
    assert!(errors("postgresql://app@db1,db2/pay", ALL_THREE).is_empty());
    for store in [
        "sqlite://./x.db",
        "redis://cache:6379",
        "redis+sentinel://s1:26379/m",
        "memory://",
        "idemgate://ks:8081",
    ] {
        let errs = errors(store, ALL_THREE);
        for key in [
            "forward_journal_file",
            "forward_journal_window",
            "failover_grace",
        ] {
            assert!(named(&errs, key), "{store}, {key}: {errs:?}");
        }
        assert!(
            errs.iter().all(|e| e.contains("PostgreSQL only")),
            "{errs:?}"
        );
    }
    // The defaults apply to every store; a URL's password is never repeated.
    let defaults = "forward_journal_window = \"10m\"\nfailover_grace = \"10s\"\n";
    assert!(errors("redis://cache:6379", defaults).is_empty());
    let errs = errors("redis://:secret@cache:6379", ALL_THREE);
    assert!(named(&errs, "forward_journal_file") && !errs.concat().contains("secret"));
}

#[test]
fn the_window_is_at_least_a_second() {
    let with = |window: &str| {
        let keys =
            format!("forward_journal_file = \"j.db\"\nforward_journal_window = \"{window}\"\n");
        errors("postgres://db/pay", &keys)
    };
    assert!(with("1s").is_empty());
    assert!(with("1h").is_empty());
    for bad in ["999ms", "0s", "soon"] {
        assert!(
            named(&with(bad), "forward_journal_window"),
            "{bad}: {:?}",
            with(bad)
        );
    }
    // Checked with or without a file.
    let errs = errors("postgres://db/pay", "forward_journal_window = \"0s\"\n");
    assert!(named(&errs, "forward_journal_window"), "{errs:?}");
    let errs = errors("postgres://db/pay", "failover_grace = \"later\"\n");
    assert!(named(&errs, "failover_grace"), "{errs:?}");
    assert!(named(&with("25h"), "forward_journal_window"));
}

#[test]
fn the_grace_outlasts_the_connection_checks_and_is_bounded() {
    let with = |grace: &str| {
        errors(
            "postgres://db/pay",
            &format!("failover_grace = \"{grace}\"\n"),
        )
    };
    assert!(with("2s").is_empty() && with("10m").is_empty());
    for bad in ["0s", "1s", "11m", "300000000y"] {
        assert!(
            named(&with(bad), "failover_grace"),
            "{bad}: {:?}",
            with(bad)
        );
    }
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = format!("forward_journal_file = \"{}\"\n", dir.path().display());
    let errs = errors("postgres://db/pay", &keys);
    assert!(named(&errs, "forward_journal_file"), "{errs:?}");
    assert!(errs.concat().contains("is a directory"), "{errs:?}");
    let keys = format!(
        "forward_journal_file = \"{}\"\n",
        dir.path().join("journal.db").display()
    );
    assert!(errors("postgres://db/pay", &keys).is_empty());
}

#[test]
fn the_journal_reaches_the_serving_store_options_only() {
    let keys = "forward_journal_file = \"state/journal.db\"\nforward_journal_window = \"2m\"\nfailover_grace = \"3s\"\n";
    let v = validated("postgres://db/pay", keys);
    let journal = v.base.store_options.replication.forward_journal.clone();
    // A relative path is the working directory's, as every path of the file.
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        journal,
        Some(ForwardJournalOptions {
            path: cwd.join("state/journal.db"),
            window: Duration::from_secs(120),
            failover_grace: Duration::from_secs(3),
        })
    );
    // What the other commands open the store with (migrate, purge, inspect, config check
    // --connect, ...) has no journal: the running gateway holds the file.
    let config = Config::from_toml(&format!("store = \"postgres://db/pay\"\n{keys}")).unwrap();
    assert_eq!(config.open_options().replication.forward_journal, None);
    assert_eq!(
        config.serving_open_options().replication.forward_journal,
        journal
    );
    // Unset: no journal, and the defaults otherwise.
    let v = validated("postgres://db/pay", "");
    assert_eq!(v.base.store_options.replication.forward_journal, None);
    let v = validated("postgres://db/pay", "forward_journal_file = \"/j.db\"\n");
    assert_eq!(
        v.base.store_options.replication.forward_journal,
        Some(ForwardJournalOptions::new("/j.db"))
    );
}

#[test]
fn each_key_needs_a_restart() {
    let pg = |keys: &str| validated("postgres://db/pay", keys);
    let running = pg("forward_journal_file = \"/a.db\"\n");
    let changed = pg(ALL_THREE);
    assert_eq!(
        crate::reload::restart_only(&running, &changed),
        [
            "forward_journal_file",
            "forward_journal_window",
            "failover_grace"
        ]
    );
    assert_eq!(
        crate::reload::restart_only(&pg(""), &running),
        ["forward_journal_file"]
    );
    let longer = pg("forward_journal_file = \"/a.db\"\nforward_journal_window = \"1h\"\n");
    assert_eq!(
        crate::reload::restart_only(&running, &longer),
        ["forward_journal_window"]
    );
    assert!(
        crate::reload::restart_only(&running, &pg("forward_journal_file = \"/a.db\"\n")).is_empty()
    );
}

#[tokio::test]
async fn a_journal_on_another_store_is_refused_when_opened() {
    let mut options = Config::default().open_options();
    options.replication.forward_journal = Some(ForwardJournalOptions::new("/nowhere/j.db"));
    let err = crate::store::open(&StoreUrl::Memory, &options)
        .await
        .expect_err("a journal on memory:// is refused");
    assert!(
        err.to_string().starts_with("forward_journal_file:"),
        "{err}"
    );
}
