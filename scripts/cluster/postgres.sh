#!/usr/bin/env bash
# A PostgreSQL primary and a streaming standby built from this machine's PostgreSQL binaries
# (initdb, pg_basebackup, pg_ctl), for the replication tests and the failover soak.
#
#   postgres.sh start DIR async|sync   build both under DIR, print their ports as KEY=VALUE
#   postgres.sh stall DIR              stop the standby's WAL receiver (SIGSTOP): it takes nothing
#   postgres.sh resume DIR             let it run again (SIGCONT)
#   postgres.sh kill-primary DIR       kill -9 the primary's postmaster and its backends
#   postgres.sh drop-receiver DIR      kill -9 the (stalled) WAL receiver: what it had not
#                                      written yet is lost, as an asynchronous failover loses it
#   postgres.sh restart-old DIR        start the killed primary again, read-write on its old
#                                      timeline (the operator's mistake after a failover)
#   postgres.sh promote DIR            promote the standby and wait until it takes writes
#   postgres.sh stop DIR               stop both servers and delete DIR
#
# In `sync` mode the primary has `synchronous_standby_names = 'FIRST 1 (standby)'`; in `async`
# mode it has none. initdb and pg_ctl refuse to run as root: as root, they run as `postgres`.
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[ -x "${bin:-}/initdb" ] || { echo "postgres.sh: no initdb under /usr/lib/postgresql/*/bin" >&2; exit 2; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ready() { # PORT
  for _ in $(seq 100); do
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$1" && return
    sleep 0.1
  done
  echo "postgres.sh: server on port $1 did not become ready" >&2
  return 1
}

psql_at() { # PORT SQL
  "$bin/psql" -X -q -At -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"
}

start() { # DIR MODE
  local dir=$1 mode=$2 primary standby
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; chmod 0755 "$dir"; fi
  as_pg test -w "$dir" || { echo "postgres.sh: $dir (and its parents) must be reachable by user postgres" >&2; exit 2; }
  primary=$(free_port)
  standby=$(free_port)
  while [ "$standby" = "$primary" ]; do standby=$(free_port); done
  as_pg "$bin/initdb" -D "$dir/primary" -U postgres --auth=trust -N >/dev/null
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $primary"
    echo "unix_socket_directories = '$dir'"
    echo "wal_level = replica"
    echo "max_wal_senders = 4"
    echo "fsync = off"
    echo "wal_sender_timeout = 5s"
    echo "max_connections = 60"
    if [ "$mode" = sync ]; then echo "synchronous_standby_names = 'FIRST 1 (standby)'"; fi
  } | as_pg tee -a "$dir/primary/postgresql.conf" >/dev/null
  echo "host replication all 127.0.0.1/32 trust" | as_pg tee -a "$dir/primary/pg_hba.conf" >/dev/null
  as_pg "$bin/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
  wait_ready "$primary"
  as_pg "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$dir/standby" -R -X stream
  {
    echo "port = $standby"
    echo "primary_conninfo = 'host=127.0.0.1 port=$primary user=postgres application_name=standby'"
    echo "wal_receiver_timeout = 5s"
    echo "wal_retrieve_retry_interval = 200ms"
  } | as_pg tee -a "$dir/standby/postgresql.auto.conf" >/dev/null
  as_pg "$bin/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w start >/dev/null
  wait_ready "$standby"
  for _ in $(seq 100); do
    [ "$(psql_at "$primary" "select count(*) from pg_stat_replication where state = 'streaming'")" = 1 ] && break
    sleep 0.1
  done
  echo "PRIMARY_PORT=$primary"
  echo "STANDBY_PORT=$standby"
}

postmaster_pid() { # DATADIR
  head -n1 "$1/postmaster.pid" 2>/dev/null || true
}

walreceiver_pid() { # DIR
  pgrep -P "$(postmaster_pid "$1/standby")" -f 'walreceiver' | head -n1
}

stop() { # DIR
  local dir=$1 node pid
  for node in standby primary; do
    [ -d "$dir/$node" ] || continue
    pid=$(postmaster_pid "$dir/$node")
    [ -n "$pid" ] && pkill -CONT -P "$pid" 2>/dev/null || true
    as_pg "$bin/pg_ctl" -D "$dir/$node" -m immediate -w stop >/dev/null 2>&1 || true
  done
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "$2" "${3:-async}" ;;
  stall) kill -STOP "$(walreceiver_pid "$2")" ;;
  resume) kill -CONT "$(walreceiver_pid "$2")" ;;
  kill-primary)
    pid=$(postmaster_pid "$2/primary")
    pkill -KILL -P "$pid" || true
    kill -KILL "$pid" ;;
  drop-receiver)
    pid=$(walreceiver_pid "$2")
    if [ -n "$pid" ]; then kill -KILL "$pid"; fi
    pkill -CONT -P "$(postmaster_pid "$2/standby")" 2>/dev/null || true ;;
  restart-old)
    rm -f "$2/primary/postmaster.pid"
    as_pg "$bin/pg_ctl" -D "$2/primary" -l "$2/primary.log" -w start >/dev/null
    port=$(sed -n 's/^port = //p' "$2/primary/postgresql.conf" | tail -n1)
    wait_ready "$port" ;;
  promote)
    as_pg "$bin/pg_ctl" -D "$2/standby" -w promote >/dev/null
    port=$(sed -n 's/^port = //p' "$2/standby/postgresql.auto.conf" | tail -n1)
    for _ in $(seq 100); do
      [ "$(psql_at "$port" 'select pg_is_in_recovery()')" = f ] && exit 0
      sleep 0.1
    done
    echo "postgres.sh: the standby did not leave recovery" >&2
    exit 1 ;;
  stop) stop "$2" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
