# The instruction budget (scripts/bench/budget.sh): the release build's instructions per
# request, by callgrind, against scripts/bench/budget.txt; more than 5 % over fails the run.
# Installs what it needs from Debian's packages when missing: valgrind, nginx-light and
# libnginx-mod-http-echo (the upstream). About 8 minutes on a clean clone (the release build).
instruction_budget() {
  local missing=()
  command -v valgrind >/dev/null || missing+=(valgrind)
  command -v nginx >/dev/null || missing+=(nginx-light)
  ls /usr/lib/nginx/modules/ngx_http_echo_module.so >/dev/null 2>&1 || missing+=(libnginx-mod-http-echo)
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "scripts/test: installing ${missing[*]} (Debian packages) for the instruction budget"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
      || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
  fi
  echo "scripts/test: the instruction budget (scripts/bench/budget.sh)"
  scripts/bench/budget.sh
}
if ! instruction_budget; then
  echo "scripts/test: the instruction budget failed: a scenario costs more than its baseline allows (scripts/bench/budget.txt)" >&2
  status=1
fi
