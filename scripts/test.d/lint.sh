# Lints of the whole workspace: formatting (`cargo fmt --check`), clippy on every target with
# warnings denied, and the docs with broken intra-doc links denied (every feature, so the
# axum and PostgreSQL parts are checked too). A failure of any of them fails the run.
lint_checks() {
  local failed=0
  cargo fmt --all --check || { echo "scripts/test: cargo fmt --check found unformatted code" >&2; failed=1; }
  cargo clippy --workspace --all-targets --all-features -- -D warnings \
    || { echo "scripts/test: clippy found warnings" >&2; failed=1; }
  RUSTDOCFLAGS="-D rustdoc::broken-intra-doc-links -D rustdoc::private-intra-doc-links" \
    cargo doc --workspace --all-features --no-deps \
    || { echo "scripts/test: cargo doc found broken links" >&2; failed=1; }
  return "$failed"
}
if ! lint_checks; then
  echo "scripts/test: the lint checks failed" >&2
  status=1
fi
