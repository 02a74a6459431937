//! idemgate-redis (under construction).
