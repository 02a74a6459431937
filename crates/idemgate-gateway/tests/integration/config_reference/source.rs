//! The keys of the configuration structs, read from their source with `syn`: name, type and
//! doc comment, as serde's derive reads the file (`flatten` expanded, `skip` left out).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The structs the file is read into, each in the source file that holds it (under
/// `crates/`). `RouteTable` is read as a [`RouteEntry`].
pub(super) const STRUCTS: &[(&str, &str)] = &[
    ("Config", "idemgate-gateway/src/config.rs"),
    ("RouteEntry", "idemgate-tower/src/policy/file.rs"),
    ("RoutePolicy", "idemgate-tower/src/policy.rs"),
    ("JwtConfig", "idemgate-gateway/src/config/jwt.rs"),
    ("KeyServiceConfig", "idemgate-key-service/src/lib.rs"),
    ("ClientConfig", "idemgate-key-service/src/auth.rs"),
];

/// Field types that are sections of their own (a table or an array of tables), by the
/// struct that holds their keys.
pub(super) const SECTIONS: &[(&str, &str)] = &[
    ("RouteTable", "RouteEntry"),
    ("JwtConfig", "JwtConfig"),
    ("KeyServiceConfig", "KeyServiceConfig"),
    ("ClientConfig", "ClientConfig"),
];

/// One key of the file as its struct declares it.
pub(super) struct Key {
    pub(super) name: String,
    pub(super) ty: syn::Type,
    pub(super) doc: String,
}

pub(super) fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The keys of struct `name` in declaration order, `#[serde(flatten)]` fields expanded and
/// `#[serde(skip)]` ones left out; section fields (see [`SECTIONS`]) are kept.
pub(super) fn keys(name: &str) -> Vec<Key> {
    let file = STRUCTS.iter().find(|(n, _)| *n == name).unwrap().1;
    let text = std::fs::read_to_string(crates_dir().join(file)).unwrap();
    let ast = syn::parse_file(&text).unwrap();
    let strukt = ast
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Struct(s) if s.ident == name => Some(s),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no struct {name} in {file}"));
    assert!(
        !serde_words(&strukt.attrs).contains("rename_all"),
        "{name}: teach the generator serde's rename_all"
    );
    let mut out = Vec::new();
    for field in &strukt.fields {
        let serde = serde_words(&field.attrs);
        if serde.contains("skip") || serde.contains("skip_deserializing") {
            continue;
        }
        assert!(
            !serde.contains("rename") && !serde.contains("alias"),
            "{name}: teach the generator serde's rename"
        );
        if serde.contains("flatten") {
            out.extend(keys(&type_name(&field.ty)));
            continue;
        }
        out.push(Key {
            name: field.ident.as_ref().unwrap().to_string(),
            ty: field.ty.clone(),
            doc: doc(&field.attrs),
        });
    }
    out
}

/// The words of a field's `#[serde(...)]` attributes (`skip`, `flatten`, `default`, ...).
pub(super) fn serde_words(attrs: &[syn::Attribute]) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            words.insert(meta.path.get_ident().unwrap().to_string());
            if meta.input.peek(syn::Token![=]) {
                meta.value()?.parse::<syn::Expr>()?;
            }
            Ok(())
        })
        .unwrap();
    }
    words
}

/// A field's doc comment as one line.
pub(super) fn doc(attrs: &[syn::Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last segment of a type path (`Option<String>` → `Option`).
pub(super) fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().unwrap().ident.to_string(),
        _ => panic!("a field type the generator does not know"),
    }
}

/// The type argument of `Option<T>` or `Vec<T>`.
pub(super) fn inner(ty: &syn::Type) -> Option<&syn::Type> {
    let syn::Type::Path(p) = ty else { return None };
    match &p.path.segments.last()?.arguments {
        syn::PathArguments::AngleBracketed(args) => match args.args.first()? {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

/// The struct holding the keys of a section field, if it is one.
pub(super) fn section(ty: &syn::Type) -> Option<&'static str> {
    let name = type_name(ty);
    let ty = match name.as_str() {
        "Option" | "Vec" => inner(ty)?,
        _ => ty,
    };
    SECTIONS
        .iter()
        .find(|(t, _)| *t == type_name(ty))
        .map(|(_, s)| *s)
}
