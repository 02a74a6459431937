# The protocol model (crates/idemgate-model, docs/model.md): checked to completion at CI's
# bound, and each planted bug refuted. Built on its own (it is outside the workspace: the
# checker needs the release profile), into target/model. About 8 minutes of 2 cores and
# 6 GiB of memory: it runs beside the workspace's tests (which wait on sockets and timers
# much of the time), and scripts/test waits for it at the end (model_wait).
# IDEMGATE_MODEL=0 skips it.
model_log="${TMPDIR:-/tmp}/idemgate-model.log"
model_pid=""
if [ "${IDEMGATE_MODEL:-1}" != 0 ]; then
  echo "scripts/test: the protocol model (crates/idemgate-model), in the background: $model_log"
  cargo test --release --manifest-path crates/idemgate-model/Cargo.toml --target-dir target/model \
    >"$model_log" 2>&1 &
  model_pid=$!
fi

# Waits for the model's run; fails when it found a counterexample or did not build.
model_wait() {
  [ -n "$model_pid" ] || return 0
  if wait "$model_pid"; then
    grep -E '^test result' "$model_log" || true
    return 0
  fi
  cat "$model_log" >&2
  echo "scripts/test: the protocol model found a counterexample, or did not build (above)" >&2
  return 1
}
