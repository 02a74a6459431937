use std::path::Path;

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::*;

#[test]
fn rfc8785_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir.join("input")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let input = std::fs::read(&path).unwrap();
        let want =
            String::from_utf8(std::fs::read(dir.join("output").join(&name)).unwrap()).unwrap();
        let got = jcs(&input).unwrap_or_else(|| panic!("{name} refused"));
        assert_eq!(String::from_utf8_lossy(&got), want, "{name}");
        // The fingerprint form is the same, but for numbers, which it keeps as written.
        let want = match name.as_str() {
            "structures.json" => want.replace("\"\\n\":56,", "\"\\n\":56.0,"),
            "values.json" => want.replace(
                "[333333333.3333333,1e+30,4.5,0.002,1e-27]",
                "[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]",
            ),
            _ => want,
        };
        let fingerprint_form =
            canonical_json(&input, &[]).unwrap_or_else(|| panic!("{name} refused"));
        assert_eq!(String::from_utf8_lossy(&fingerprint_form), want, "{name}");
        seen += 1;
    }
    assert_eq!(seen, 6, "all six RFC 8785 vectors were read");
}

#[test]
fn texts_that_cannot_be_canonical_are_refused() {
    for text in [
        r#"{"a":1,"a":2}"#,
        r#"{"é":1,"\u00e9":2}"#,
        r#"[{"x":{"k":1,"k":1}}]"#,
        r#""\ud800""#,
        "{",
        "[1,]",
        "01",
        "1 2",
        "[1.]",
        "{\"a\" 1}",
        "nul",
        "\"tab\there\"",
    ] {
        assert_eq!(canonical_json(text.as_bytes(), &[]), None, "{text}");
    }
    assert_eq!(canonical_json(b"\xff", &[]), None);
    let deep = "[".repeat(200) + &"]".repeat(200);
    assert_eq!(canonical_json(deep.as_bytes(), &[]), None);
    // a duplicate past the first 16 names of a large object
    let members: Vec<String> = (0..20).map(|i| format!("\"m{i}\":{i}")).collect();
    let wide = format!("{{{},\"m3\":0}}", members.join(","));
    assert_eq!(canonical_json(wide.as_bytes(), &[]), None);
    let unique = format!("{{{}}}", members.join(","));
    assert!(canonical_json(unique.as_bytes(), &[]).is_some());
}

#[test]
fn numbers_are_kept_as_written() {
    let c = |t: &str| canonical_json(t.as_bytes(), &[]).map(|v| String::from_utf8(v).unwrap());
    for (a, b) in [
        ("9007199254740993", "9007199254740992"),
        ("1000.0", "1000"),
        ("1e3", "1000"),
        ("-0", "0"),
        ("0.30000000000000001", "0.3"),
        ("18446744073709551616", "18446744073709551615"),
    ] {
        assert_eq!(c(a).as_deref(), Some(a));
        assert_ne!(
            c(a),
            c(b),
            "{a} and {b} are different requests to an exact reader"
        );
    }
}

#[test]
fn whitespace_order_and_escapes_do_not_matter() {
    for (text, want) in [
        ("1.50", "1.50"),
        (r#"{"\u00e9":"\u00e9"}"#, r#"{"é":"é"}"#),
        (" [ true , null ] ", "[true,null]"),
        (
            r#"{"b":[1, {"d":1,"c":2}],"a":"\/"}"#,
            r#"{"a":"/","b":[1,{"c":2,"d":1}]}"#,
        ),
    ] {
        assert_eq!(
            canonical_json(text.as_bytes(), &[]).as_deref(),
            Some(want.as_bytes()),
            "{text}"
        );
    }
}

#[test]
fn ignored_pointers_are_removed() {
    let ignore = vec![
        "/client_ts".to_owned(),
        "/meta/trace~1id".to_owned(),
        "/items/1".to_owned(),
        "/missing/x".to_owned(),
    ];
    let a = canonical_json(
        br#"{"amount":5,"client_ts":1,"meta":{"trace/id":"a","n":1},"items":[1,2,3]}"#,
        &ignore,
    );
    let b = canonical_json(
        br#"{"amount":5,"client_ts":2,"meta":{"trace/id":"b","n":1},"items":[1,9,3]}"#,
        &ignore,
    );
    assert_eq!(a, b);
    assert_eq!(a.unwrap(), br#"{"amount":5,"items":[1,3],"meta":{"n":1}}"#);
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "[a-zA-Z0-9é€😀 \"\\\\/\n]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Writes `v` with object members in an order picked by `seed` and whitespace between tokens.
fn write_shuffled(v: &Value, seed: &mut u64, out: &mut String) {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as usize
    };
    let ws = [" ", "", "\n\t", "  "][next() % 4];
    match v {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            let n = members.len();
            for i in (1..n).rev() {
                members.swap(i, next() % (i + 1));
            }
            out.push('{');
            for (i, (k, val)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(ws);
                out.push(':');
                write_shuffled(val, seed, out);
            }
            out.push_str(ws);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                write_shuffled(item, seed, out);
            }
            out.push(']');
        }
        leaf => out.push_str(&serde_json::to_string(leaf).unwrap()),
    }
}

fn count_leaves(v: &Value) -> usize {
    match v {
        Value::Object(map) => map.values().map(count_leaves).sum(),
        Value::Array(items) => items.iter().map(count_leaves).sum(),
        _ => 1,
    }
}

/// Changes one leaf of `v` (picked by `pick`) to a different value; false if `v` has none.
fn mutate_leaf(v: &mut Value, pick: &mut usize) -> bool {
    match v {
        Value::Object(map) => map.values_mut().any(|x| mutate_leaf(x, pick)),
        Value::Array(items) => items.iter_mut().any(|x| mutate_leaf(x, pick)),
        leaf => {
            if *pick > 0 {
                *pick -= 1;
                return false;
            }
            *leaf = match leaf {
                Value::Null => Value::Bool(false),
                Value::Bool(b) => Value::Bool(!*b),
                Value::Number(n) => Value::from(n.as_f64().unwrap() + 1.0),
                Value::String(s) => Value::String(format!("{s}x")),
                _ => unreachable!(),
            };
            true
        }
    }
}

proptest! {
    #[test]
    fn member_order_and_whitespace_never_matter(v in json_value(), seed in any::<u64>()) {
        let plain = serde_json::to_string(&v).unwrap();
        let mut seed = seed;
        let mut shuffled = String::new();
        write_shuffled(&v, &mut seed, &mut shuffled);
        let a = canonical_json(plain.as_bytes(), &[]);
        prop_assert!(a.is_some(), "{}", plain);
        prop_assert_eq!(a, canonical_json(shuffled.as_bytes(), &[]));
    }

    #[test]
    fn different_values_never_share_a_form(v in json_value(), pick in any::<usize>()) {
        let leaves = count_leaves(&v);
        if leaves == 0 {
            return Ok(()); // only empty containers: no value to change
        }
        let mut changed = v.clone();
        let mut p = pick % leaves;
        prop_assert!(mutate_leaf(&mut changed, &mut p));
        prop_assume!(changed != v);
        let a = canonical_json(serde_json::to_string(&v).unwrap().as_bytes(), &[]);
        let b = canonical_json(serde_json::to_string(&changed).unwrap().as_bytes(), &[]);
        prop_assert_ne!(a, b);
    }

    #[test]
    fn never_panics(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = canonical_json(&raw, &["/a".to_owned()]);
    }
}
