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
