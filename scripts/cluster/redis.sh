#!/usr/bin/env bash
# A Redis primary, one replica and three Sentinels on ports this script picks, for the
# replication tests and the failover soak. Nothing is kept on disk but under DIR.
#
#   redis.sh start DIR     start them, print KEY=VALUE lines (PRIMARY_PORT, REPLICA_PORT,
#                          SENTINEL_PORTS=a,b,c, MASTER=name)
#   redis.sh stall DIR     stop the replica process (SIGSTOP): it acknowledges nothing
#   redis.sh resume DIR    let it run again (SIGCONT)
#   redis.sh kill-primary DIR   kill -9 the primary
#   redis.sh stop DIR      stop every process started under DIR and delete DIR
#
# Sentinels run as `redis-sentinel` when Debian's package is installed, else as
# `redis-server --sentinel` (the same program).
set -euo pipefail

MASTER=idemgate

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ping() { # PORT
  for _ in $(seq 100); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "redis.sh: nothing answers on port $1" >&2
  return 1
}

server() { # DIR NAME PORT [ARGS...]
  local dir=$1 name=$2 port=$3
  shift 3
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    --dbfilename "$name.rdb" --pidfile "$dir/$name.pid" --logfile "$dir/$name.log" \
    --daemonize yes "$@"
  wait_ping "$port"
}

sentinel() { # DIR N PRIMARY_PORT
  local dir=$1 n=$2 primary=$3 port conf
  port=$(free_port)
  conf="$dir/sentinel-$n.conf"
  cat >"$conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile $dir/sentinel-$n.pid
logfile $dir/sentinel-$n.log
dir $dir
sentinel monitor $MASTER 127.0.0.1 $primary 2
sentinel down-after-milliseconds $MASTER 1000
sentinel failover-timeout $MASTER 3000
sentinel parallel-syncs $MASTER 1
EOF
  if command -v redis-sentinel >/dev/null; then redis-sentinel "$conf"; else redis-server "$conf" --sentinel; fi
  wait_ping "$port"
  echo "$port"
}

start() { # DIR
  local dir=$1 primary replica ports=()
  mkdir -p "$dir"
  primary=$(free_port)
  server "$dir" primary "$primary"
  replica=$(free_port)
  server "$dir" replica "$replica" --replicaof 127.0.0.1 "$primary"
  for _ in $(seq 100); do
    redis-cli -p "$replica" info replication | grep -q 'master_link_status:up' && break
    sleep 0.05
  done
  for n in 1 2 3; do ports+=("$(sentinel "$dir" "$n" "$primary")"); done
  echo "PRIMARY_PORT=$primary"
  echo "REPLICA_PORT=$replica"
  echo "SENTINEL_PORTS=$(IFS=,; echo "${ports[*]}")"
  echo "MASTER=$MASTER"
}

pid_of() { # DIR NAME
  cat "$1/$2.pid" 2>/dev/null || true
}

stop() { # DIR
  local dir=$1 pid
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -CONT "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "$2" ;;
  stall) kill -STOP "$(pid_of "$2" replica)" ;;
  resume) kill -CONT "$(pid_of "$2" replica)" ;;
  kill-primary) kill -KILL "$(pid_of "$2" primary)" ;;
  stop) stop "$2" ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
