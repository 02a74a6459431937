# Express on Node.js for the differential path test (crates/idemgate-gateway/tests/upstreams/
# express_app.js): `npm ci` of the committed package.json and package-lock.json there into
# target/test-node, again whenever either changes. Node.js 20 and npm come with the machine;
# where `node` is missing, Debian's nodejs and npm are installed. Tests read the interpreter
# from IDEMGATE_TEST_NODE and the modules folder from IDEMGATE_TEST_NODE_MODULES and say why
# they skip when they are unset.
node_env() {
  local dir="target/test-node" src="crates/idemgate-gateway/tests/upstreams" node
  node="$(command -v node || true)"
  if [ -z "$node" ] || ! command -v npm >/dev/null; then
    echo "scripts/test: installing Node.js (Debian packages nodejs, npm)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get install -y --no-install-recommends nodejs npm >/dev/null \
      || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends nodejs npm >/dev/null; } \
      || return 1
    node="$(command -v node)"
  fi
  if [ ! -d "$dir/node_modules/express" ] || ! cmp -s "$src/package.json" "$dir/package.json" \
    || ! cmp -s "$src/package-lock.json" "$dir/package-lock.json"; then
    echo "scripts/test: preparing $dir ($src/package-lock.json)"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || return 1
  fi
  IDEMGATE_TEST_NODE="$node"
  IDEMGATE_TEST_NODE_MODULES="$(cd "$dir/node_modules" && pwd)"
  export IDEMGATE_TEST_NODE IDEMGATE_TEST_NODE_MODULES
}
if ! node_env; then
  echo "scripts/test: the Node.js test environment could not be prepared" >&2
  status=1
fi
