//! The Lua scripts, one per primitive, each prefixed with `scripts/common.lua`. They run
//! through [`redis::Script`]: `EVALSHA`, and on `NOSCRIPT` (a restarted or failed-over
//! server, a new cluster node) `SCRIPT LOAD` and `EVALSHA` again. Every script touches one
//! key, `KEYS[1]`, so it runs on the record's cluster slot.

use std::sync::LazyLock;

use redis::Script;

/// [`Scripts`], each field the script `scripts/<field>.lua` prefixed with
/// `scripts/common.lua`, and [`SCRIPTS`].
macro_rules! scripts {
    ($($name:ident),*) => {
        /// Every script, hashed once.
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)*
        }

        /// The scripts, built on first use.
        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: Script::new(concat!(
                include_str!("scripts/common.lua"),
                "\n",
                include_str!(concat!("scripts/", stringify!($name), ".lua"))
            )),)*
        });
    };
}

scripts! {
    insert_or_get, take_over, renew, complete, fail, release, get, admin_delete
}
