//! idemgate-postgres (under construction).
