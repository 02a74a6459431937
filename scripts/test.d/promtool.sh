# The Prometheus alert rules: `promtool check rules` and their unit tests. Installs Debian's
# `prometheus` package (which ships promtool) when promtool is missing; a failure of either
# check fails the run.
promtool_checks() {
  if ! command -v promtool >/dev/null; then
    echo "scripts/test: installing promtool (Debian package prometheus)"
    if [ "$(id -u)" = 0 ]; then apt-get install -y prometheus >/dev/null; else sudo apt-get install -y prometheus >/dev/null; fi
  fi
  (cd deploy/prometheus && promtool check rules idemgate.rules.yml && promtool test rules idemgate.rules.test.yml)
}
if ! promtool_checks; then
  echo "scripts/test: the Prometheus alert rules failed their checks" >&2
  exit 1
fi
