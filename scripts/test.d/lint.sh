# Lints of the whole workspace: formatting (`cargo fmt --check`), clippy on every target with
# warnings denied, and the docs with broken intra-doc links denied (every feature, so the
# axum and PostgreSQL parts are checked too), and the `idemgate` crate with each feature
# alone. A failure of any of them fails the run.
lint_checks() {
  local failed=0
  # A toolchain installed with a minimal profile lacks them.
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add rustfmt clippy || return 1
  fi
  cargo fmt --all --check || { echo "scripts/test: cargo fmt --check found unformatted code" >&2; failed=1; }
  cargo clippy --workspace --all-targets --all-features -- -D warnings \
    || { echo "scripts/test: clippy found warnings" >&2; failed=1; }
  # The facade builds with each of its features alone (sqlx-style optional drivers).
  local feature
  for feature in tower axum sqlite postgres redis jwt limits metrics openapi; do
    cargo check --quiet -p idemgate --no-default-features --features "$feature" \
      || { echo "scripts/test: idemgate does not build with only feature $feature" >&2; failed=1; }
  done
  # So does the tower crate: none of its optional parts, then each alone.
  cargo check --quiet -p idemgate-tower --no-default-features \
    || { echo "scripts/test: idemgate-tower does not build without features" >&2; failed=1; }
  for feature in axum postgres jwt limits metrics openapi toml; do
    cargo check --quiet -p idemgate-tower --no-default-features --features "$feature" \
      || { echo "scripts/test: idemgate-tower does not build with only feature $feature" >&2; failed=1; }
  done
  # Without its optional parts it pulls in neither JWT nor utoipa.
  if cargo tree -p idemgate-tower --no-default-features | grep -E 'jsonwebtoken|utoipa' >&2; then
    echo "scripts/test: idemgate-tower without features depends on the crates above" >&2; failed=1
  fi
  # Its tests with every feature (the workspace run has the defaults): axum, PostgreSQL, TOML.
  cargo test --quiet -p idemgate-tower --all-features \
    || { echo "scripts/test: idemgate-tower's tests fail with every feature" >&2; failed=1; }
  RUSTDOCFLAGS="-D rustdoc::broken-intra-doc-links -D rustdoc::private-intra-doc-links" \
    cargo doc --workspace --all-features --no-deps \
    || { echo "scripts/test: cargo doc found broken links" >&2; failed=1; }
  return "$failed"
}
if ! lint_checks; then
  echo "scripts/test: the lint checks failed" >&2
  status=1
fi
