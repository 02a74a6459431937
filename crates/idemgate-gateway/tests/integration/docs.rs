//! Every problem `type` the gateway can produce has its section in docs/errors.md.

#[test]
fn every_problem_anchor_is_documented() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let doc = std::fs::read_to_string(format!("{root}/docs/errors.md")).unwrap();
    let mut sources = String::new();
    for file in [
        "crates/idemgate-tower/src/rejection.rs",
        "crates/idemgate-gateway/src/server.rs",
    ] {
        sources += &std::fs::read_to_string(format!("{root}/{file}")).unwrap();
    }
    // anchors are the kebab-case string literals next to titles in those files
    let mut anchors: Vec<&str> = sources
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.len() > 3 && s.chars().all(|c| c.is_ascii_lowercase() || c == '-') && s.contains('-')
                || *s == "internal"
        })
        .collect();
    anchors.sort();
    anchors.dedup();
    assert!(anchors.len() >= 14, "found {anchors:?}");
    for a in anchors {
        assert!(
            doc.contains(&format!("\n## {a}\n")),
            "docs/errors.md has no section `## {a}`"
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
