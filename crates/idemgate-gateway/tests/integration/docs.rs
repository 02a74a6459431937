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
