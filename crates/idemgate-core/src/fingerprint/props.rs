//! Properties of the multipart canonical form.

use proptest::prelude::*;

use super::multipart::canonical_form_data;

/// One form part: name, filename, content type, content.
#[derive(Debug, Clone)]
struct Part {
    name: String,
    filename: Option<String>,
    content_type: Option<String>,
    content: Vec<u8>,
}

fn part() -> impl Strategy<Value = Part> {
    (
        "[a-zA-Z0-9_ .-]{1,12}",
        proptest::option::of("[a-zA-Z0-9_ .-]{1,12}"),
        proptest::option::of("(text|application|image)/[a-z0-9.+-]{1,10}"),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(name, filename, content_type, content)| Part {
            name,
            filename,
            content_type,
            content,
        })
}

/// A boundary of RFC 2046's alphabet. An all-dash boundary is left out: its delimiter
/// (`---` for `-`) occurs again, overlapping, inside the close delimiter (`-----`), which the
/// strict parse refuses (the body is then hashed as received; see
/// `an_all_dash_boundary_is_hashed_raw`).
fn boundary() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9'()+_,./:=?-]{1,70}".prop_filter("not only dashes", |b| b.bytes().any(|c| c != b'-'))
}

fn body(parts: &[Part], boundary: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{}\"", p.name);
        if let Some(f) = &p.filename {
            disposition += &format!("; filename=\"{f}\"");
        }
        out.extend_from_slice(disposition.as_bytes());
        if let Some(ct) = &p.content_type {
            out.extend_from_slice(format!("\r\nContent-Type: {ct}").as_bytes());
        }
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(&p.content);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    out
}

/// The canonical form, required to exist (a generated form is well formed unless its
/// content holds the delimiter, which the caller excludes).
fn canonical(parts: &[Part], boundary: &str) -> Vec<u8> {
    canonical_form_data(&body(parts, boundary), boundary.as_bytes()).expect("a strict form")
}

/// Whether `--boundary` occurs anywhere in a part: in its content, or in a header value
/// (name, filename, content type), where the strict parse refuses it.
fn holds_delimiter(parts: &[Part], boundary: &str) -> bool {
    let d = format!("--{boundary}");
    let holds = |bytes: &[u8]| bytes.windows(d.len()).any(|w| w == d.as_bytes());
    parts.iter().any(|p| {
        holds(&p.content)
            || holds(p.name.as_bytes())
            || p.filename.as_deref().is_some_and(|f| holds(f.as_bytes()))
            || p.content_type
                .as_deref()
                .is_some_and(|c| holds(c.as_bytes()))
    })
}

proptest! {
    #[test]
    fn a_new_boundary_never_changes_the_canonical_form(
        parts in proptest::collection::vec(part(), 0..5),
        a in boundary(),
        b in boundary(),
    ) {
        prop_assume!(!holds_delimiter(&parts, &a) && !holds_delimiter(&parts, &b));
        prop_assert_eq!(canonical(&parts, &a), canonical(&parts, &b));
    }

    #[test]
    fn changing_any_part_changes_the_canonical_form(
        parts in proptest::collection::vec(part(), 1..5),
        pick in any::<prop::sample::Index>(),
        what in 0..4u8,
        other in part(),
        a in boundary(),
    ) {
        let i = pick.index(parts.len());
        let mut changed = parts.clone();
        let p = &mut changed[i];
        match what {
            0 => p.name = other.name,
            1 => p.filename = other.filename,
            2 => p.content_type = other.content_type,
            _ => p.content = other.content,
        }
        let before = &parts[i];
        let after = &changed[i];
        prop_assume!(
            (before.name.as_str(), &before.filename, &before.content_type, &before.content)
                != (after.name.as_str(), &after.filename, &after.content_type, &after.content)
        );
        prop_assume!(!holds_delimiter(&parts, &a) && !holds_delimiter(&changed, &a));
        prop_assert_ne!(canonical(&parts, &a), canonical(&changed, &a));
    }

    #[test]
    fn the_parser_never_panics(body in proptest::collection::vec(any::<u8>(), 0..256), b in boundary()) {
        let _ = canonical_form_data(&body, b.as_bytes());
    }
}

#[test]
fn an_all_dash_boundary_is_hashed_raw() {
    let part = Part {
        name: "_".into(),
        filename: None,
        content_type: None,
        content: Vec::new(),
    };
    for b in ["-", "--", "----"] {
        assert_eq!(
            canonical_form_data(&body(std::slice::from_ref(&part), b), b.as_bytes()),
            None
        );
    }
    assert!(canonical_form_data(&body(std::slice::from_ref(&part), "-a"), b"-a").is_some());
    // The delimiter inside a header value is not at a line start: refused too.
    let named = Part {
        name: "--5".into(),
        ..part
    };
    assert_eq!(canonical_form_data(&body(&[named], "5"), b"5"), None);
}
