//! The replication keys: each refused on a store it does not apply to, naming the key, and
//! passed to the store's options.

use std::time::Duration;

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

#[test]
fn synchronous_replication_is_postgresql_only() {
    let key = "require_synchronous_replication = true\n";
    assert!(errors("postgres://app@db/pay", key).is_empty());
    for store in [
        "sqlite://./x.db",
        "redis://cache:6379",
        "memory://",
        "idemgate://ks:8081",
    ] {
        let errs = errors(store, key);
        assert!(
            named(&errs, "require_synchronous_replication"),
            "{store}: {errs:?}"
        );
    }
}

#[test]
fn redis_waits_are_redis_only_and_not_on_a_cluster() {
    let keys = "redis_wait_replicas = 1\nredis_wait_timeout = \"200ms\"\n";
    assert!(errors("redis://cache:6379", keys).is_empty());
    assert!(errors("rediss://cache:6380/2", keys).is_empty());
    assert!(errors("redis+sentinel://s1:26379,s2:26379/idemgate", keys).is_empty());
    for store in [
        "postgres://app@db/pay",
        "sqlite://./x.db",
        "redis+cluster://a:1,b:2",
    ] {
        let errs = errors(store, keys);
        assert!(named(&errs, "redis_wait_replicas"), "{store}: {errs:?}");
        assert!(named(&errs, "redis_wait_timeout"), "{store}: {errs:?}");
    }
    // The defaults apply to every store, and a URL's password is never repeated.
    assert!(errors("postgres://app@db/pay", "redis_wait_timeout = \"500ms\"\n").is_empty());
    let errs = errors("rediss+cluster://u:secret@a:1", "redis_wait_replicas = 2\n");
    assert!(named(&errs, "redis_wait_replicas") && !errs.concat().contains("secret"));
}

#[test]
fn the_wait_timeout_is_between_a_millisecond_and_the_store_deadline() {
    let at = |timeout: &str| {
        let keys = format!(
            "redis_wait_replicas = 1\nredis_wait_timeout = \"{timeout}\"\nstore_timeout = \"1s\"\n"
        );
        errors("redis://cache:6379", &keys)
    };
    assert!(at("999ms").is_empty());
    for bad in ["1s", "5s", "0s", "500us"] {
        assert!(
            named(&at(bad), "redis_wait_timeout"),
            "{bad}: {:?}",
            at(bad)
        );
    }
    assert!(named(&at("soon"), "redis_wait_timeout"));
    // Without replicas to wait for, the timeout is not used: a short store deadline is fine.
    assert!(errors("redis://cache:6379", "store_timeout = \"100ms\"\n").is_empty());
}

#[test]
fn the_keys_reach_the_store_options() {
    let v = Config::from_toml(
        "upstream = \"http://a:1\"\nstore = \"redis://c:6379\"\nredis_wait_replicas = 2\nredis_wait_timeout = \"250ms\"\n",
    )
    .unwrap()
    .validate()
    .unwrap();
    let r = v.base.store_options.replication;
    assert_eq!(
        (r.redis_wait_replicas, r.redis_wait_timeout),
        (2, Duration::from_millis(250))
    );
    assert!(!r.require_synchronous);
    let v = Config::from_toml(
        "upstream = \"http://a:1\"\nstore = \"postgres://db/pay\"\nrequire_synchronous_replication = true\n",
    )
    .unwrap()
    .validate()
    .unwrap();
    assert!(v.base.store_options.replication.require_synchronous);
    assert!(matches!(v.base.store, StoreUrl::Postgres(_)));
}

#[test]
fn each_key_needs_a_restart() {
    let validated = |keys: &str| {
        let text = format!("upstream = \"http://a:1\"\nstore = \"redis://c:6379\"\n{keys}");
        Config::from_toml(&text).unwrap().validate().unwrap()
    };
    let running = validated("");
    let changed = validated("redis_wait_replicas = 1\nredis_wait_timeout = \"100ms\"\n");
    assert_eq!(
        crate::reload::restart_only(&running, &changed),
        ["redis_wait_replicas", "redis_wait_timeout"]
    );
    let pg = |keys: &str| {
        let text = format!("upstream = \"http://a:1\"\nstore = \"postgres://db/pay\"\n{keys}");
        Config::from_toml(&text).unwrap().validate().unwrap()
    };
    let changed = pg("require_synchronous_replication = true\n");
    assert_eq!(
        crate::reload::restart_only(&pg(""), &changed),
        ["require_synchronous_replication"]
    );
}

#[test]
fn redis_waits_for_a_bounded_number_of_replicas() {
    let wait = |n: u64| {
        errors(
            "redis://cache:6379",
            &format!("redis_wait_replicas = {n}\n"),
        )
    };
    assert!(wait(16).is_empty(), "{:?}", wait(16));
    for bad in [17, 2_147_483_648] {
        assert!(
            named(&wait(bad), "redis_wait_replicas"),
            "{bad}: {:?}",
            wait(bad)
        );
    }
}

#[test]
fn the_pool_size_is_postgresql_only_bounded_and_restart_only() {
    let key = |n: u64| format!("store_max_connections = {n}\n");
    for n in [1, 64, 1000] {
        assert!(errors("postgres://app@db/pay", &key(n)).is_empty(), "{n}");
    }
    for n in [0, 1001] {
        let errs = errors("postgres://app@db/pay", &key(n));
        assert!(named(&errs, "store_max_connections"), "{n}: {errs:?}");
    }
    let text = format!("store = \"postgres://db/pay\"\n{}", key(1 << 32));
    let err = Config::from_toml(&text).unwrap_err().to_string();
    assert!(err.contains("store_max_connections"), "{err}");
    for store in [
        "sqlite://./x.db",
        "redis://c:6379",
        "memory://",
        "idemgate://ks:8081",
    ] {
        let errs = errors(store, &key(32));
        assert!(named(&errs, "store_max_connections"), "{store}: {errs:?}");
        // The default is every store's.
        assert!(errors(store, &key(16)).is_empty(), "{store}");
    }
    let pg = |keys: &str| {
        let text = format!("upstream = \"http://a:1\"\nstore = \"postgres://db/pay\"\n{keys}");
        Config::from_toml(&text).unwrap().validate().unwrap()
    };
    assert_eq!(pg("").base.store_options.max_connections, 16);
    let changed = pg(&key(48));
    assert_eq!(changed.base.store_options.max_connections, 48);
    let restart = crate::reload::restart_only(&pg(""), &changed);
    assert!(
        restart.iter().any(|k| k.contains("store_max_connections")),
        "{restart:?}"
    );
}
