# The Prometheus alert rules: `promtool check rules` and their unit tests. Installs Debian's
# `prometheus` package (which ships promtool) when promtool is missing; a failure of either
# check fails the run.
promtool_checks() {
  if ! command -v promtool >/dev/null; then
    echo "scripts/test: installing promtool (Debian package prometheus)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    # The package lists of a fresh machine may be missing or stale: update once and retry.
    $sudo apt-get install -y --no-install-recommends prometheus >/dev/null \
      || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends prometheus >/dev/null; }
  fi
  (cd deploy/prometheus && promtool check rules idemgate.rules.yml && promtool test rules idemgate.rules.test.yml)
}
if ! promtool_checks; then
  echo "scripts/test: the Prometheus alert rules failed their checks" >&2
  status=1
fi
