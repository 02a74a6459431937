# A Python virtual environment for the tests written in Python (black-box tests of the running
# binaries, OpenAPI validation, schemathesis), with the packages pinned in
# scripts/requirements-test.txt. Tests read its interpreter from IDEMGATE_TEST_PYTHON and say
# why they skip when it is unset; this script sets it, so in CI nothing is skipped.
python_env() {
  local venv="target/test-venv" python
  python="$(command -v python3 || true)"
  if [ -z "$python" ]; then
    echo "scripts/test: installing python3 (Debian packages python3, python3-venv)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get install -y --no-install-recommends python3 python3-venv >/dev/null \
      || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends python3 python3-venv >/dev/null; }
    python="$(command -v python3)"
  fi
  local stamp="$venv/.requirements"
  if [ ! -x "$venv/bin/python" ] || ! cmp -s scripts/requirements-test.txt "$stamp"; then
    echo "scripts/test: preparing $venv (scripts/requirements-test.txt)"
    rm -rf "$venv"
    "$python" -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -r scripts/requirements-test.txt || return 1
    cp scripts/requirements-test.txt "$stamp"
  fi
  IDEMGATE_TEST_PYTHON="$(cd "$venv/bin" && pwd)/python"
  export IDEMGATE_TEST_PYTHON
}
if ! python_env; then
  echo "scripts/test: the Python test environment could not be prepared" >&2
  status=1
fi
