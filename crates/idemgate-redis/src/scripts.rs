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
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) complete: Script,
    pub(crate) fail: Script,
    pub(crate) release: Script,
    pub(crate) get: Script,
}

/// The scripts, built on first use.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: script!("acquire"),
    renew: script!("renew"),
    complete: script!("complete"),
    fail: script!("fail"),
    release: script!("release"),
    get: script!("get"),
});
