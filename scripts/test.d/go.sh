# The Go toolchain for the Go recipe of docs/clients.md (built and run against the gateway by
# the clients test): Debian's golang-go when `go` is missing. Tests read the binary from
# IDEMGATE_TEST_GO and say why they skip when it is unset.
go_env() {
  local go
  go="$(command -v go || true)"
  if [ -z "$go" ] && [ -x /usr/lib/go/bin/go ]; then go=/usr/lib/go/bin/go; fi
  if [ -z "$go" ]; then
    echo "scripts/test: installing Go (Debian package golang-go)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get install -y --no-install-recommends golang-go >/dev/null \
      || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends golang-go >/dev/null; } \
      || return 1
    go="$(command -v go)"
  fi
  IDEMGATE_TEST_GO="$go"
  export IDEMGATE_TEST_GO
}
if ! go_env; then
  echo "scripts/test: Go could not be installed; the Go recipe is not built" >&2
  status=1
fi
