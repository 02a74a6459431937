use super::*;

fn normal(path: &str) -> String {
    normalise(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .as_str()
        .to_owned()
}

#[test]
fn paths_in_normal_form_come_back_as_sent_and_borrowed() {
    for path in [
        "/",
        "/charges",
        "/charges/",
        "/Charges",
        "/accounts/42/refunds",
        "/v1/things:batchCreate",
        "/caf%C3%A9",
        "/a%20b",
        "/a%2Fb",
        "/a.b/c..d/...",
        "/~user/-_.",
        "/a/%25",
    ] {
        let n = normalise(path).unwrap();
        assert_eq!(n.as_str(), path);
        assert!(matches!(n.into_cow(), Cow::Borrowed(_)), "{path}");
    }
}

#[test]
fn unreserved_escapes_are_decoded_and_others_upper_cased() {
    for (sent, want) in [
        ("/%63harges", "/charges"),
        ("/%63%68%61%72%67%65%73", "/charges"),
        ("/%43harges", "/Charges"),
        ("/%7e%7Euser", "/~~user"),
        ("/a%2db%5f%2E", "/a-b_."),
        ("/caf%c3%a9", "/caf%C3%A9"),
        ("/a%2fb", "/a%2Fb"),
        ("/a%3bb", "/a%3Bb"),
        ("/a/%62/c%2fd", "/a/b/c%2Fd"),
        ("/x/y/%7a", "/x/y/z"),
        ("/%25%32%46", "/%252F"),
        ("/charges%2F", "/charges%2F"),
        ("/%63harges/", "/charges/"),
    ] {
        assert_eq!(normal(sent), want, "{sent}");
    }
}

#[test]
fn spellings_servers_disagree_on_are_refused() {
    use PathAmbiguity as A;
    for (sent, why) in [
        ("//charges", A::EmptySegment),
        ("/charges//", A::EmptySegment),
        ("/a//b", A::EmptySegment),
        ("/./charges", A::DotSegment),
        ("/a/../charges", A::DotSegment),
        ("/charges/.", A::DotSegment),
        ("/charges/..", A::DotSegment),
        ("/%2E/charges", A::DotSegment),
        ("/%2e%2E/charges", A::DotSegment),
        ("/a/.%2e/charges", A::DotSegment),
        ("/charges;x=1", A::Params),
        ("/charges;", A::Params),
        ("/a;b/charges", A::Params),
        ("/charges\\x", A::Backslash),
        ("\\charges", A::NotAbsolute),
        ("/a%5Ccharges", A::Backslash),
        ("/a%5ccharges", A::Backslash),
        ("/charges%00", A::Nul),
        ("/charges%", A::BadEscape),
        ("/charges%4", A::BadEscape),
        ("/charges%zz", A::BadEscape),
        ("/charges%G0", A::BadEscape),
        ("", A::NotAbsolute),
        ("*", A::NotAbsolute),
        ("charges", A::NotAbsolute),
    ] {
        assert_eq!(normalise(sent), Err(why), "{sent}");
    }
}

#[test]
fn encoded_and_trailing_slashes_are_reported_for_the_route_to_decide() {
    for (path, encoded, trailing) in [
        ("/charges", false, false),
        ("/charges/", false, true),
        ("/", false, false),
        ("/projects/group%2Fproject", true, false),
        ("/projects/group%2fproject/", true, true),
        ("/a%252F", false, false),
    ] {
        let n = normalise(path).unwrap();
        assert_eq!(n.encoded_slash(), encoded, "{path}");
        assert_eq!(n.trailing_slash(), trailing, "{path}");
    }
}

#[test]
fn case_folds_letters_but_not_escapes() {
    for (path, want) in [
        ("/charges", "/charges"),
        ("/Charges", "/charges"),
        ("/CHARGES/Abc", "/charges/abc"),
        ("/group%2Fa/X", "/group%2Fa/x"),
        ("/%C3%A9T", "/%C3%A9t"),
        ("/a%2FB", "/a%2Fb"),
    ] {
        assert_eq!(fold_case(path), want, "{path}");
    }
    assert!(matches!(fold_case("/a%2F/b"), Cow::Borrowed(_)));
}

#[test]
fn a_trailing_slash_toggles() {
    assert_eq!(toggle_trailing_slash("/charges").unwrap(), "/charges/");
    assert_eq!(toggle_trailing_slash("/charges/").unwrap(), "/charges");
    assert_eq!(toggle_trailing_slash("/"), None);
}

#[test]
fn settings_parse_their_spellings_and_name_them_when_wrong() {
    assert_eq!("same".parse(), Ok(TrailingSlash::Same));
    assert_eq!("refuse".parse(), Ok(TrailingSlash::Refuse));
    assert_eq!("keep".parse(), Ok(EncodedSlash::Keep));
    assert_eq!("normalised".parse(), Ok(ForwardPath::Normalised));
    assert_eq!("as-sent".parse(), Ok(ForwardPath::AsSent));
    assert_eq!("refuse".parse(), Ok(Unmatched::Refuse));
    assert_eq!(Unmatched::default(), Unmatched::Default);
    assert_eq!(TrailingSlash::default(), TrailingSlash::Refuse);
    assert_eq!(EncodedSlash::default().to_string(), "refuse");
    assert_eq!(ForwardPath::default().to_string(), "as-sent");
    let err = "normalized".parse::<ForwardPath>().unwrap_err();
    assert_eq!(err, "`normalized` is not \"as-sent\" or \"normalised\"");
}

#[test]
fn pchar_escapes_are_decoded_like_routers_read_them() {
    // RFC 3986 §3.3 pchar other than `;`: sub-delims, `:` and `@` (§6.2.2.2).
    for (sent, want) in [
        (
            "/users/alice%40example.com/charges",
            "/users/alice@example.com/charges",
        ),
        ("/v1/payments%3Acapture", "/v1/payments:capture"),
        ("/v1/payments%3acapture", "/v1/payments:capture"),
        ("/a%2Bb", "/a+b"),
        ("/a%21", "/a!"),
        ("/%24%26%27%28%29%2A%2C%3D", "/$&'()*,="),
        ("/a%40b%2fc", "/a@b%2Fc"),
    ] {
        assert_eq!(normal(sent), want, "{sent}");
    }
    for raw in [
        "/users/alice@example.com",
        "/v1/payments:capture",
        "/a+b!$&'()*,=",
    ] {
        let n = normalise(raw).unwrap();
        assert_eq!(n.as_str(), raw);
        assert!(matches!(n.into_cow(), Cow::Borrowed(_)), "{raw}");
    }
}

#[test]
fn bytes_whose_raw_form_means_something_else_stay_escaped_in_upper_case() {
    for kept in [
        "/a%2Fb", "/a%25b", "/a%3Bb", "/a%3Fb", "/a%23b", "/a%20b", "/a%01b", "/a%22b", "/a%3Cb",
        "/a%3Eb", "/a%5Bb", "/a%5Db", "/a%5Eb", "/a%60b", "/a%7Bb", "/a%7Cb", "/a%7Db", "/a%7Fb",
    ] {
        assert_eq!(normal(kept), kept, "{kept}");
        assert_eq!(
            normal(&kept.to_ascii_lowercase()),
            kept,
            "{kept} in lower case"
        );
    }
}

#[test]
fn raw_bytes_not_allowed_in_a_uri_are_escaped() {
    for (sent, want) in [
        ("/a{b}", "/a%7Bb%7D"),
        ("/a\"b", "/a%22b"),
        ("/a|b^c", "/a%7Cb%5Ec"),
        ("/a[0]", "/a%5B0%5D"),
        ("/a`b", "/a%60b"),
        ("/a b", "/a%20b"),
    ] {
        assert_eq!(normal(sent), want, "{sent}");
    }
}

#[test]
fn non_ascii_is_spelled_as_upper_case_utf8_escapes() {
    for (sent, want) in [
        ("/caf\u{e9}", "/caf%C3%A9"),
        ("/caf%c3%a9", "/caf%C3%A9"),
        ("/caf%C3%A9", "/caf%C3%A9"),
        ("/\u{65e5}/x", "/%E6%97%A5/x"),
        ("/%F0%9F%98%80", "/%F0%9F%98%80"),
        ("/\u{1f600}", "/%F0%9F%98%80"),
    ] {
        assert_eq!(normal(sent), want, "{sent}");
    }
    assert_eq!(
        fold_case(&normal("/Caf\u{c9}")),
        "/caf%C3%89",
        "escapes not folded"
    );
}

#[test]
fn escapes_that_are_not_utf8_are_refused() {
    for sent in [
        "/%FF",
        "/a%C0%AF",
        "/%C0%80",
        "/%E0%80%AF",
        "/%ED%A0%80",
        "/%F4%90%80%80",
        "/%F5%80%80%80",
        "/%C3",
        "/%C3/%A9",
        "/%C3a",
        "/%A9",
        "/%E6%97",
        "/%C3\u{e9}",
    ] {
        assert_eq!(normalise(sent), Err(PathAmbiguity::InvalidUtf8), "{sent}");
    }
    assert_eq!(normalise("/%C3%00"), Err(PathAmbiguity::Nul));
}

#[test]
fn a_normal_form_is_its_own_normal_form_and_a_valid_request_target() {
    for sent in [
        "/a%40b/%3a/%c3%a9/\u{e9}/{x}/%2f/%25/a+b",
        "/%7e%41%2D%5f%2e/caf\u{e9}%20",
    ] {
        let once = normal(sent);
        assert_eq!(normal(&once), once, "{sent}");
        let target: http::uri::PathAndQuery = once.parse().unwrap();
        assert_eq!(target.path(), once);
        assert!(once.is_ascii(), "{once}");
    }
}
