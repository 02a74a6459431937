//! The lifecycle's defaults (record TTL, lease TTL, max lease, what a lapsed lease means,
//! store timeout) are written once, in their `Default` impl: every other production line
//! (`crates/*/src`, comments and tests left out) takes them from there.

use std::path::{Path, PathBuf};

/// Each setting, the spellings of its default value (lower case) and the `Default` impl
/// (file, type) that owns it.
type Owner = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static str,
);
const OWNERS: &[Owner] = &[
    (
        "record_ttl",
        DAY,
        "idemgate-core/src/lifecycle/config.rs",
        "RoutePlan",
    ),
    (
        "lease_ttl",
        TEN_S,
        "idemgate-core/src/lifecycle/config.rs",
        "RoutePlan",
    ),
    (
        "max_lease",
        MINUTE,
        "idemgate-core/src/lifecycle/config.rs",
        "RoutePlan",
    ),
    (
        "lease_expired",
        UNKNOWN,
        "idemgate-core/src/lifecycle/config.rs",
        "RoutePlan",
    ),
    (
        "store_timeout",
        TWO_S,
        "idemgate-core/src/lifecycle/config.rs",
        "LifecycleConfig",
    ),
];
const DAY: &[&str] = &[
    "24 * 3600",
    "86_400",
    "86400",
    "\"24h\"",
    "\"1day\"",
    "24 * 3_600_000",
];
const TEN_S: &[&str] = &["from_secs(10)", "\"10s\"", "10_000", "10000"];
const MINUTE: &[&str] = &["from_secs(60)", "\"60s\"", "60_000", "60000"];
const UNKNOWN: &[&str] = &["leaseexpiredpolicy::unknown", "\"unknown\""];
const TWO_S: &[&str] = &["from_secs(2)", "\"2s\"", "2_000", "2000"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "tests" | "testing") {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("tests.rs") && name != "testing.rs" {
            out.push(path);
        }
    }
}

/// `line` without its `//` comment (a `://` in a string is kept).
fn code(line: &str) -> &str {
    let mut from = 0;
    while let Some(i) = line[from..].find("//") {
        let at = from + i;
        if at == 0 || line.as_bytes()[at - 1] != b':' {
            return &line[..at];
        }
        from = at + 2;
    }
    line
}

/// True when `line` gives `setting` its default (one of `values`: `record_ttl:
/// Duration::from_secs(24 * 3600)`, `lease_ttl = "10s"`) or names a `DEFAULT_` constant of it.
fn writes_default(line: &str, setting: &str, values: &[&str]) -> bool {
    let line = line.to_ascii_lowercase();
    if line.contains(&format!("default_{setting}")) {
        return true;
    }
    line.match_indices(setting).any(|(i, _)| {
        if line[..i].ends_with("max_") || line[..i].ends_with("min_") {
            return false; // a bound, not the default
        }
        let rest = line[i + setting.len()..]
            .trim_start_matches("_ms")
            .trim_start();
        let Some(rest) = rest.strip_prefix(':').or_else(|| rest.strip_prefix('=')) else {
            return false;
        };
        !rest.starts_with([':', '=', '>']) && values.iter().any(|v| rest.contains(v))
    })
}

#[test]
fn each_lifecycle_default_is_written_once_in_its_default_impl() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(
        files.len() > 50,
        "{} files under {}",
        files.len(),
        crates.display()
    );
    let mut stray = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file
            .strip_prefix(&crates)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        // The `impl Default for X` block a line is in, tracked by brace depth.
        let (mut depth, mut inside): (i64, Option<(String, i64)>) = (0, None);
        for (n, line) in text.lines().enumerate() {
            let line = code(line);
            if let Some(rest) = line.trim_start().strip_prefix("impl Default for ") {
                let ty: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                inside = Some((ty, depth));
            }
            if line.trim_start().starts_with("mod tests") {
                break; // a file's unit tests come last
            }
            for (setting, values, owner_file, owner_ty) in OWNERS {
                let owned =
                    shown == *owner_file && inside.as_ref().is_some_and(|(ty, _)| ty == owner_ty);
                if !owned && writes_default(line, setting, values) {
                    stray.push(format!("{shown}:{}: {}", n + 1, line.trim()));
                }
            }
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            if inside
                .as_ref()
                .is_some_and(|(_, d)| depth <= *d && line.contains('}'))
            {
                inside = None;
            }
        }
    }
    assert!(
        stray.is_empty(),
        "defaults written outside their Default impl:\n{}",
        stray.join("\n")
    );
    // The check finds what it looks for.
    assert!(writes_default(
        "pub const DEFAULT_LEASE_TTL_MS: u64 = 1;",
        "lease_ttl",
        TEN_S
    ));
    let day = "            record_ttl: Duration::from_secs(24 * 3600),";
    assert!(writes_default(day, "record_ttl", DAY));
    assert!(writes_default(
        "store_timeout: \"2s\".into(),",
        "store_timeout",
        TWO_S
    ));
    assert!(writes_default(
        "c.defaults.lease_ttl = Some(\"10s\".into());",
        "lease_ttl",
        TEN_S
    ));
    assert!(!writes_default(
        "record_ttl: plan.record_ttl,",
        "record_ttl",
        DAY
    ));
}
