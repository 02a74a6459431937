//! Version 2's canonical form of `name=value&...` pairs (query strings and
//! `application/x-www-form-urlencoded` bodies).
//!
//! Pairs are sorted by a *folded* name, stably, and kept byte for byte. Two names that any
//! common parser may read as one name fold alike, so their pairs keep their order (a parser
//! that keeps the first, the last or a list of the values reads both requests alike). The
//! fold is deliberately coarse: the name is percent-decoded (three rounds, `+` as a space)
//! and reduced to its first ASCII letter or digit, lower-cased, or to one class for a first
//! non-ASCII byte. So `%61mount` and `amount`, `a.b`, `a_b` and `a[b` (PHP), `Amount` and
//! `amount` (ASP.NET), `a[]` and `a[x]`, `a%00x` and `a` (C strings), `É` and `é` all keep
//! their order, while `amount=1&to=bob` and `to=bob&amount=1` are one request. Folding more
//! names together only keeps more order, never less.
//!
//! Strings are kept as sent when they hold a `;` (some parsers split pairs on it, others do
//! not) or more than [`MAX_SORTED_PAIRS`] pairs: parsers that stop after a number of
//! parameters (Node's `querystring` and PHP's `max_input_vars` at 1000) would read a reordered
//! string differently.

/// The most pairs a string may have to be sorted.
pub(super) const MAX_SORTED_PAIRS: usize = 64;

/// The canonical form of `raw`: pairs split on `&`, empty ones dropped, stably sorted by
/// folded name, joined with `&`; `raw` itself when it holds a `;`.
pub(super) fn folded_sorted_pairs(raw: &[u8]) -> Vec<u8> {
    if raw.contains(&b';') {
        return raw.to_vec();
    }
    let pairs: Vec<&[u8]> = raw
        .split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .collect();
    if pairs.len() > MAX_SORTED_PAIRS {
        return raw.to_vec();
    }
    let mut pairs: Vec<(u8, &[u8])> = pairs
        .into_iter()
        .map(|p| (fold(p.split(|&b| b == b'=').next().unwrap_or(p)), p))
        .collect();
    pairs.sort_by_key(|p| p.0);
    let pairs: Vec<&[u8]> = pairs.into_iter().map(|(_, p)| p).collect();
    pairs.join(&b'&')
}

/// The name's sort class (see the module documentation): its first ASCII letter or digit,
/// lower-cased; `0x80` for a first non-ASCII byte; `0` for none.
fn fold(name: &[u8]) -> u8 {
    let mut name = name.to_vec();
    for _ in 0..3 {
        name = percent_decode(&name);
    }
    name.into_iter()
        .find(|b| b.is_ascii_alphanumeric() || !b.is_ascii())
        .map_or(0, |b| {
            if b.is_ascii() {
                b.to_ascii_lowercase()
            } else {
                0x80
            }
        })
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
            ("a[b", "a_b"),
            ("a%00x", "a"),
            ("%C3%89", "%C3%A9"),
            ("%D0%80", "%D1%90"),
            ("amount", "account"),
        ] {
            let one = form(&format!("{x}=1&{y}=2"));
            let other = form(&format!("{y}=2&{x}=1"));
            assert_ne!(one, other, "{x} / {y}");
            // other names still sort around them
            assert_eq!(
                form(&format!("{x}=1&{y}=2&0=9")),
                format!("0=9&{x}=1&{y}=2").into_bytes(),
                "{x} / {y}"
            );
        }
    }

    #[test]
    fn long_strings_keep_their_order() {
        let many: Vec<String> = (0..MAX_SORTED_PAIRS)
            .map(|i| format!("f{i:04}=x"))
            .collect();
        let many = many.join("&");
        assert_ne!(
            form(&format!("amount=5&{many}")),
            form(&format!("{many}&amount=5"))
        );
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
