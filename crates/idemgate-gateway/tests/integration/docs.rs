//! Every problem `type` the gateway can produce has its section in docs/errors.md; the README
//! is a front page, and every relative link of it and of `docs/` reaches a file and heading.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

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

/// The README and every page under `docs/`.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

/// The lines of `text` outside fenced code blocks, with inline code spans taken out.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line.split('`').step_by(2).collect());
        }
    }
    out
}

/// The anchors GitHub gives the headings of `text`: lower case, spaces to `-`, punctuation
/// other than `-` and `_` dropped, `-1`, `-2` ... after repeats.
fn anchors(text: &str) -> HashSet<String> {
    let mut fenced = false;
    let mut seen = HashSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let heading = line.trim_start_matches('#');
        if fenced || heading.len() == line.len() || !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
    }
    seen
}

/// The relative link targets (`](target)`) of `text`'s prose.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    for line in prose(text) {
        for part in line.split("](").skip(1) {
            let target = part.split([')', ' ']).next().unwrap_or_default();
            if !target.contains("://") && !target.starts_with("mailto:") {
                links.push(target.to_owned());
            }
        }
    }
    links
}

#[test]
fn every_relative_link_reaches_a_file_and_its_heading() {
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in relative_links(&text) {
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                target.exists(),
                "{}: `{link}`: no such file",
                page.display()
            );
            if !anchor.is_empty() && (file.is_empty() || file.ends_with(".md")) {
                let heads = anchors(&std::fs::read_to_string(&target).unwrap());
                assert!(
                    heads.contains(anchor),
                    "{}: `{link}`: no heading with that anchor in {}",
                    page.display(),
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "checked only {checked} links");
}

/// The README is a front page: at most 300 lines, linking every page under `docs/`.
#[test]
fn the_readme_is_a_front_page_that_links_every_page() {
    let pages = pages();
    let readme = std::fs::read_to_string(&pages[0]).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines");
    let links = relative_links(&readme);
    for page in &pages[1..] {
        let name = format!("docs/{}", page.file_name().unwrap().to_str().unwrap());
        assert!(
            links
                .iter()
                .any(|l| l.split('#').next() == Some(name.as_str())),
            "README.md does not link {name}"
        );
    }
}
