//! The settings of route matching: per route [`TrailingSlash`] and [`EncodedSlash`]
//! (with `RoutePolicy::case_insensitive`), for the whole policy [`ForwardPath`] and
//! [`Unmatched`]. Each parses from (`FromStr`, `Deserialize`) and displays (`Display`,
//! `Serialize`) as its configuration spelling.

use std::fmt;
use std::str::FromStr;

/// Defines a settings enum with its configuration spellings (`FromStr`, `Display`).
macro_rules! setting {
    (
        $(#[$meta:meta])* $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $spelling:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// The configuration spellings, in order.
            pub const SPELLINGS: &'static [&'static str] = &[$($spelling),+];

            /// This setting as the configuration spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $spelling, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
            }
        }

        impl FromStr for $name {
            type Err = String;

            /// Parses a configuration spelling.
            ///
            /// # Errors
            /// A message naming the value and the accepted spellings.
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $spelling => Ok(Self::$variant), )+
                    other => Err(format!(
                        "`{other}` is not \"{}\"",
                        Self::SPELLINGS.join("\" or \"")
                    )),
                }
            }
        }
    };
}

setting! {
    /// What a path that differs from a route's template only by a trailing `/` means
    /// (`/charges/` on `POST /charges`, or `/charges` on `POST /charges/`). For a path that
    /// matches no route, the default route's setting decides whether a trailing `/` is
    /// refused or dropped from the scope.
    TrailingSlash {
        /// `400 ambiguous-path` (the default): Express reads `/charges/` as `/charges`,
        /// Werkzeug and Go's `ServeMux` do not.
        #[default]
        Refuse = "refuse",
        /// The same route (and, for unmatched paths, the same scope as without the `/`),
        /// for upstreams that ignore a trailing slash (Express by default).
        Same = "same",
    }
}

setting! {
    /// What an encoded `/` (`%2F`) inside a segment means.
    EncodedSlash {
        /// `400 ambiguous-path` (the default): some servers decode it before routing (so
        /// `/a%2Fb` is `/a/b`), others keep it inside the segment.
        #[default]
        Refuse = "refuse",
        /// A literal escape inside its segment (`/projects/group%2Fproject`), for APIs whose
        /// ids hold slashes and whose upstream routes on the undecoded path.
        Keep = "keep",
    }
}

setting! {
    /// Which path a covered request is forwarded with (the fingerprint reads the same one).
    ForwardPath {
        /// The request target as the client sent it (the default).
        #[default]
        AsSent = "as-sent",
        /// The normal form ([`crate::path::normalise`]): the upstream runs what the scope
        /// names, and two spellings of one path are one request to the fingerprint.
        Normalised = "normalised",
    }
}

setting! {
    /// What a covered request whose path matches no route gets.
    Unmatched {
        /// The default route's policy, scoped by its concrete path (the default).
        #[default]
        Default = "default",
        /// `404 no-such-route`, with or without a key, and nothing forwarded.
        Refuse = "refuse",
    }
}
