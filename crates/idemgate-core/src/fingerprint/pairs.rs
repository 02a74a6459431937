//! Version 2's canonical form of `name=value&...` pairs (query strings and
//! `application/x-www-form-urlencoded` bodies).
//!
//! Pairs are sorted by a *folded* name, stably, and kept byte for byte. Two names that any
//! common parser may read as one name fold alike, so their pairs keep their order (a parser
//! that keeps the first, the last or a list of the values reads both requests alike): the
//! folded name is percent-decoded (three rounds, `+` as a space), cut at the first `[` (PHP
//! and Rails array syntax), and reduced to its ASCII letters, lower-cased, its digits and
//! its non-ASCII bytes (PHP reads `a.b` and `a b` as `a_b`; ASP.NET compares names without
//! case). Folding more names together only keeps more order, never less. A string with `;`
//! is kept unsorted: some parsers split pairs on it, others do not.

/// The canonical form of `raw`: pairs split on `&`, empty ones dropped, stably sorted by
/// folded name, joined with `&`; `raw` itself when it holds a `;`.
pub(super) fn folded_sorted_pairs(raw: &[u8]) -> Vec<u8> {
    if raw.contains(&b';') {
        return raw.to_vec();
    }
    let mut pairs: Vec<(Vec<u8>, &[u8])> = raw
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| (fold(p.split(|&b| b == b'=').next().unwrap_or(p)), p))
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let pairs: Vec<&[u8]> = pairs.into_iter().map(|(_, p)| p).collect();
    pairs.join(&b'&')
}

/// The name as every parser might read it, folded (see the module documentation).
fn fold(name: &[u8]) -> Vec<u8> {
    let mut name = name.to_vec();
    for _ in 0..3 {
        name = percent_decode(&name);
    }
    if let Some(bracket) = name.iter().position(|&b| b == b'[') {
        name.truncate(bracket);
    }
    name.into_iter()
        .filter(|b| b.is_ascii_alphanumeric() || !b.is_ascii())
        .map(|b| b.to_ascii_lowercase())
        .collect()
}

/// `%XX` decoded, `+` read as a space; a `%` without two hex digits is kept.
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                s.get(i + 1).and_then(|&b| hex(b)),
                s.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(s: &str) -> Vec<u8> {
        folded_sorted_pairs(s.as_bytes())
    }

    #[test]
    fn distinct_names_are_sorted_and_pairs_kept_as_sent() {
        assert_eq!(form("b=2&a=1&c=%41"), b"a=1&b=2&c=%41");
        assert_eq!(form("b=2&&a=1&"), b"a=1&b=2");
        assert_eq!(form("a=1&a=2"), b"a=1&a=2");
        assert_ne!(form("a=1&a=2"), form("a=2&a=1"));
    }

    #[test]
    fn names_a_parser_may_read_as_one_keep_their_order() {
        for (x, y) in [
            ("amount", "%61mount"),
            ("amount", "%2561mount"),
            ("a b", "a+b"),
            ("a b", "a%20b"),
            ("a_b", "a.b"),
            ("a_b", "a b"),
            ("Amount", "amount"),
            ("a[]", "a[x]"),
            ("a", "a%5B0%5D"),
        ] {
            let one = form(&format!("{x}=1&{y}=2"));
            let other = form(&format!("{y}=2&{x}=1"));
            assert_ne!(one, other, "{x} / {y}");
            // other names still sort around them
            assert_eq!(
                form(&format!("z=9&{x}=1&{y}=2")),
                format!("{x}=1&{y}=2&z=9").into_bytes(),
                "{x} / {y}"
            );
        }
    }

    #[test]
    fn semicolons_keep_the_string_as_sent() {
        assert_eq!(form("b=3&a=1;b=2"), b"b=3&a=1;b=2");
        assert_ne!(form("b=3&a=1;b=2"), form("a=1;b=2&b=3"));
    }

    #[test]
    fn percent_decoding_keeps_malformed_escapes() {
        assert_eq!(percent_decode(b"%4"), b"%4");
        assert_eq!(percent_decode(b"%zz%41+"), b"%zzA ");
    }
}
