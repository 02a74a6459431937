//! Version 1 digests, computed by the release that wrote version 1 records (before version
//! 2 existed). A retry in flight across an upgrade is compared with these: a digest that
//! changes here is a false `422` for every such retry.

use super::{Fingerprint, FingerprintInput, FingerprintOptions};

/// `{"b":1,"a":2}` gzipped (one member).
const GZIP: &str = "1f8b08000000000000ffab564a52b232d4514a54b232aa050052d203110d000000";
/// `second` gzipped.
const GZIP_SECOND: &str = "1f8b08000000000000ff2b4e4dcecf4b010069111fb606000000";

struct Case {
    content_type: Option<&'static str>,
    encoding: Option<&'static str>,
    query: Option<&'static str>,
    headers: &'static [(&'static str, &'static [u8])],
    body: Vec<u8>,
    v1: &'static str,
}

fn case(content_type: Option<&'static str>, body: &[u8], v1: &'static str) -> Case {
    Case {
        content_type,
        encoding: None,
        query: None,
        headers: &[],
        body: body.to_vec(),
        v1,
    }
}

fn gzip_case(encoding: &'static str, body: Vec<u8>, v1: &'static str) -> Case {
    Case {
        encoding: Some(encoding),
        body,
        ..case(Some("application/json"), b"", v1)
    }
}

fn cases() -> Vec<Case> {
    let gz = hex::decode(GZIP).unwrap();
    let two_members = [gz.clone(), hex::decode(GZIP_SECOND).unwrap()].concat();
    let trailing = [&gz[..], b"trailing garbage"].concat();
    vec![
        Case {
            query: Some("b=2&a=1"),
            ..case(
                Some("application/json; charset=utf-8"),
                br#"{ "b": [1, 2.50, "\u00e9"], "a": {"y": null, "x": true} }"#,
                "f77ae617c8669f08493c090276c45879a3ff5e5a80fffff88a2a9aa7889a2cad",
            )
        },
        Case {
            headers: &[("x-tenant", b"7")],
            ..case(
                Some("application/x-www-form-urlencoded"),
                b"b=2&a=1&a=0",
                "1f134a268373ce861224d7ebe3af18456266ad501cdb9c04f6f667fb974fb197",
            )
        },
        case(
            Some("text/plain; charset=latin1"),
            b"hello world",
            "eb01ccf951128a7dae85ca3a6757bf28dd6a7c0e0fc3082db17667eb06a6bb06",
        ),
        case(
            None,
            b"",
            "44013a0633bd5e0b57e747f10e212b866c2ac50cceb434f172eb0233fd35d6fa",
        ),
        case(
            Some("multipart/form-data; boundary=XyZ"),
            b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--XyZ--\r\n",
            "31bca302fa369b3c010475ab045724b907a347d033153b93e12889804c842178",
        ),
        gzip_case(
            "gzip",
            gz,
            "994f9e6b3f23fac8d8c50826943b6eb613e47457deb5415f63f3d4966be1332b",
        ),
        // version 1 read the first member only: these three shared one digest
        gzip_case(
            "gzip",
            two_members,
            "994f9e6b3f23fac8d8c50826943b6eb613e47457deb5415f63f3d4966be1332b",
        ),
        gzip_case(
            "x-gzip",
            trailing,
            "994f9e6b3f23fac8d8c50826943b6eb613e47457deb5415f63f3d4966be1332b",
        ),
        gzip_case(
            "gzip",
            b"not gzip".to_vec(),
            "509ed6941e5d47137595d52126f655bce3abbd3dc999b7d81eb0950eadbdef74",
        ),
        gzip_case(
            "br",
            b"{}".to_vec(),
            "f439615ae839c807e8aa4dba89c91c683f48fc49214808f8836da68ad8217b13",
        ),
    ]
}

fn input(c: &Case) -> FingerprintInput<'_> {
    FingerprintInput {
        method: "POST",
        route: "POST /payments",
        path: "/payments",
        query: c.query,
        content_type: c.content_type,
        content_encoding: c.encoding,
        headers: c.headers,
        body: &c.body,
    }
}

#[test]
fn version_1_digests_are_unchanged() {
    for c in cases() {
        let got = Fingerprint::compute_version(1, &input(&c), &FingerprintOptions::default());
        let got = got.unwrap();
        assert_eq!(got.version, 1);
        assert_eq!(hex::encode(got.digest), c.v1, "{:?}", input(&c));
        let v2 = Fingerprint::compute(&input(&c), &FingerprintOptions::default()).unwrap();
        assert_eq!(v2.version, 2);
        assert_ne!(v2.digest, got.digest);
    }
}

#[test]
fn version_1_options_are_unchanged() {
    let c = gzip_case("gzip", hex::decode(GZIP).unwrap(), "");
    let opts = |ignore, max| FingerprintOptions {
        ignore_json_pointers: ignore,
        max_decoded_bytes: max,
    };
    let v1 = |o| {
        hex::encode(
            Fingerprint::compute_version(1, &input(&c), &o)
                .unwrap()
                .digest,
        )
    };
    // over the cap: hashed as received
    assert_eq!(
        v1(opts(&[], 5)),
        "482e0b9e493c1f63544f74ad2c27280bfa89b74833ccae2546d849d612fb9f9c"
    );
    let pointers = ["/b".to_string()];
    assert_eq!(
        v1(opts(&pointers, 100)),
        "f41a0cf544cf85d5b3adf52e45719d94e5625a1e92b870141158e7a4684eefce"
    );
}
