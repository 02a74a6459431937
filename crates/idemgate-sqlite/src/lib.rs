//! idemgate-sqlite (under construction).
