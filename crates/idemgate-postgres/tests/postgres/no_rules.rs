//! The store holds no rules of the engine: its source and SQL never name them (the SQL is
//! compare-and-set only; DESIGN.md, "Stores persist, the engine decides").

use std::path::Path;

/// Names of the engine's policy; none may appear in the store's source or migrations.
const FORBIDDEN: &[&str] = &[
    "decide",
    "Decision",
    "LeaseExpiredPolicy",
    "retry_failed",
    "max_lease",
    "apply_acquire",
];

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn src_and_sql_name_no_policy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    files(&root.join("src"), &mut paths);
    files(&root.join("migrations"), &mut paths);
    assert!(paths.len() >= 5, "{paths:?}");
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        for word in FORBIDDEN {
            assert!(!text.contains(word), "{} mentions {word}", path.display());
        }
    }
}
