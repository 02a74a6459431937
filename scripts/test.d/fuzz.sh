# A short fuzz smoke run: every core fuzz target (key parser, canonical JSON, fingerprint,
# record decoder) for a few seconds each, on the stable toolchain (see scripts/fuzz).
# Installing cargo-fuzz and the cold fuzz build take about two minutes; a crash fails the run.
# IDEMGATE_FUZZ_SECONDS sets the time per target (default 5; 0 skips the smoke run).
if [ "${IDEMGATE_FUZZ_SECONDS:-5}" != 0 ]; then
  if ! FUZZ_LOG_DIR="${TMPDIR:-/tmp}/idemgate-fuzz-smoke" scripts/fuzz --core "${IDEMGATE_FUZZ_SECONDS:-5}"; then
    echo "scripts/test: a fuzz target crashed or did not build (scripts/fuzz above)" >&2
    status=1
  fi
fi
