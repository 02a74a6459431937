//! Running the binary: `config check` reports every error in one run, `migrate` says what
//! it did, `--help` describes the whole binary, start-up errors name the store without its
//! credentials.

use crate::support::{run_idemgate, test_url};

fn idemgate(args: &[&str]) -> (i32, String) {
    run_idemgate(args)
}

#[test]
fn config_check_reports_unknown_keys_type_errors_and_bad_values_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:3000\"\nstroe = \"memory://\"\npurge_batch = \"lots\"\nlisten = \"x\"\ntls_cert_file = \"/nonexistent/cert.pem\"\n[defaults]\nkey_required = \"yes\"\nlease_ttl = \"forever\"\n[[routes]]\nroute = \"POST /p\"\nmax_body_bytes = -1\nmismatch_status = 418\n",
    )
    .unwrap();
    let (code, text) = idemgate(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}");
    for field in [
        "`stroe`: unknown key",
        "`purge_batch`:",
        "`defaults.key_required`:",
        "`routes[0].max_body_bytes`:",
        "listen:",
        "tls_key_file: missing",
        "defaults.lease_ttl:",
        "routes[0].mismatch_status:",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
}

#[test]
fn help_describes_the_whole_binary() {
    let (code, text) = idemgate(&["--help"]);
    assert_eq!(code, 0, "{text}");
    let first = text.lines().next().unwrap();
    assert!(!first.contains("idemgate serve:"), "{first}");
    assert!(first.contains("Idempotency-Key"), "{first}");
    for cmd in ["serve", "config", "migrate", "purge", "demo"] {
        assert!(text.contains(&format!("\n  {cmd} ")), "{cmd} in {text}");
    }
}

#[test]
fn migrate_says_what_it_did_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("m.db").display());
    let (code, text) = idemgate(&["migrate", "--store", &store]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("created sqlite store"), "{text}");
    let (code, text) = idemgate(&["migrate", "--store", &store]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("up to date; nothing to do"), "{text}");
    assert!(!text.contains("created"), "{text}");
}

#[test]
fn migrate_says_what_it_did_on_postgres() {
    let Some(url) = test_url("IDEMGATE_TEST_DATABASE_URL") else {
        return;
    };
    let table = format!("ops_migrate_{:x}", rand::random::<u32>());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pg.toml");
    std::fs::write(&file, format!("store_table = \"{table}\"\n")).unwrap();
    let args = [
        "migrate",
        "--store",
        &url,
        "--config",
        file.to_str().unwrap(),
    ];
    let (code, first) = idemgate(&args);
    let (_, second) = idemgate(&args);
    drop_table(&url, &table);
    assert_eq!(code, 0, "{first}");
    assert!(
        first.contains("applied migrations 0001 idempotency_records, 0002"),
        "{first}"
    );
    assert!(second.contains("up to date; nothing to do"), "{second}");
}

fn drop_table(url: &str, table: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use sqlx::Executor;
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let sql = format!("DROP TABLE IF EXISTS {table}, {table}_migrations, {table}_failovers");
        pool.execute(sql.as_str()).await.unwrap();
    });
}

#[test]
fn start_up_errors_name_the_store_without_its_password() {
    // Nothing listens on port 1: the connection is refused.
    let (code, text) = idemgate(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "",
        "--upstream",
        "http://127.0.0.1:3000",
        "--store",
        "postgres://app:s3cret@127.0.0.1:1/payments?sslmode=disable&password=s3cret",
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("postgres://app@127.0.0.1:1/payments?sslmode=disable"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn the_release_binary_carries_no_debug_info_and_profiling_keeps_it() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(root).unwrap()).unwrap();
    let profile = |name: &str| manifest["profile"][name].as_table().unwrap().clone();
    let release = profile("release");
    assert_eq!(release["debug"].as_bool(), Some(false), "{release:?}");
    assert_eq!(release["strip"].as_bool(), Some(true), "{release:?}");
    let profiling = profile("profiling");
    assert_eq!(profiling["inherits"].as_str(), Some("release"));
    assert_eq!(profiling["strip"].as_str(), Some("none"));
    assert!(profiling["debug"].as_integer().unwrap_or(0) >= 1);
    // The claim in the README is the one in the manifest.
    let rust = manifest["workspace"]["package"]["rust-version"]
        .as_str()
        .unwrap();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    assert!(readme.contains(&format!("Rust {rust} or later")), "{rust}");
}
