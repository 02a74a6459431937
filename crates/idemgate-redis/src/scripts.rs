//! The Lua scripts, one per primitive, each prefixed with `scripts/common.lua`. They run
//! through [`redis::Script`]: `EVALSHA`, and on `NOSCRIPT` (a restarted or failed-over
//! server, a new cluster node) `SCRIPT LOAD` and `EVALSHA` again. Every script touches one
//! key, `KEYS[1]`, so it runs on the record's cluster slot.

use std::sync::LazyLock;

use redis::Script;

/// Builds a script from `scripts/common.lua` and `scripts/<name>.lua`.
macro_rules! script {
    ($name:literal) => {
        Script::new(concat!(
            include_str!("scripts/common.lua"),
            "\n",
            include_str!(concat!("scripts/", $name, ".lua"))
        ))
    };
}

/// Every script, hashed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) insert_or_get: Script,
    pub(crate) take_over: Script,
    pub(crate) renew: Script,
    pub(crate) complete: Script,
    pub(crate) fail: Script,
    pub(crate) release: Script,
    pub(crate) get: Script,
    pub(crate) admin_delete: Script,
}

/// The scripts, built on first use.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    insert_or_get: script!("insert_or_get"),
    take_over: script!("take_over"),
    renew: script!("renew"),
    complete: script!("complete"),
    fail: script!("fail"),
    release: script!("release"),
    get: script!("get"),
    admin_delete: script!("admin_delete"),
});
