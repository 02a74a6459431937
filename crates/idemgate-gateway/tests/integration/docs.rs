//! Every problem `type` the gateway can produce has its section in docs/errors.md.

#[test]
fn every_problem_anchor_is_documented() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let doc = std::fs::read_to_string(format!("{root}/docs/errors.md")).unwrap();
    let catalogue = idemgate_tower::IdempotencyRejection::catalogue();
    assert!(catalogue.len() >= 22, "found {catalogue:?}");
    for r in catalogue {
        let a = r.anchor();
        assert!(
            doc.contains(&format!("\n## {a}\n")),
            "docs/errors.md has no section `## {a}`"
        );
        let status = r.status().as_u16().to_string();
        let section = doc.split(&format!("\n## {a}\n")).nth(1).unwrap_or_default();
        let section = section.split("\n## ").next().unwrap_or_default();
        assert!(
            section.contains(&status),
            "docs/errors.md `## {a}` does not name its status {status}"
        );
    }
}

/// Stores persist, the engine decides (DESIGN.md, "State machine"): no store crate's Rust,
/// SQL or Lua names the decision function or its rules, so the decision cannot drift between
/// backends again.
#[test]
fn store_crates_hold_no_decision_logic() {
    const BANNED: [&str; 9] = [
        "decide",
        "Decision",
        "DecisionPolicy",
        "LeaseExpiredPolicy",
        "lease_expired",
        "retry_failed",
        "max_lease",
        "apply_acquire",
        "RoutePlan",
    ];
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut scanned = 0;
    let mut dirs: Vec<std::path::PathBuf> =
        ["idemgate-sqlite", "idemgate-postgres", "idemgate-redis"]
            .iter()
            .flat_map(|k| ["src", "migrations"].map(|d| format!("{root}/crates/{k}/{d}").into()))
            .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !["rs", "sql", "lua"].contains(&ext) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            scanned += 1;
            let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            for word in words {
                assert!(
                    !BANNED.contains(&word),
                    "{} names `{word}`: decision logic belongs in idemgate-core",
                    path.display()
                );
            }
        }
    }
    assert!(scanned >= 30, "scanned only {scanned} files");
}
