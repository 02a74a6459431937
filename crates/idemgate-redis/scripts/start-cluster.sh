#!/usr/bin/env bash
# Starts (or finds) a three-primary Redis Cluster on 127.0.0.1:7101-7103 for the cluster
# tests of idemgate-redis, and prints the line that points the tests at it:
#
#   eval "$(crates/idemgate-redis/scripts/start-cluster.sh)"
#   cargo test -p idemgate-redis --test cluster
#
# Idempotent: nodes that already answer are kept, and the cluster is only created when it
# is not formed yet. `start-cluster.sh stop` shuts the three nodes down (nothing else).
# Nodes keep no data (--save "" --appendonly no); their cluster state lives in
# $IDEMGATE_REDIS_CLUSTER_DIR (default ${TMPDIR:-/tmp}/idemgate-redis-cluster).
# Needs redis-server and redis-cli 5 or later. Messages go to stderr, the export line to
# stdout.
set -euo pipefail

PORTS=(7101 7102 7103)
DIR="${IDEMGATE_REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/idemgate-redis-cluster}"
HOST=127.0.0.1

log() { echo "start-cluster: $*" >&2; }
die() { log "$*"; exit 1; }
answers() { redis-cli -h "$HOST" -p "$1" ping 2>/dev/null | grep -q PONG; }
info_field() { # port field
    redis-cli -h "$HOST" -p "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}

command -v redis-server >/dev/null || die "redis-server is not installed (apt-get install redis-server)"
command -v redis-cli >/dev/null || die "redis-cli is not installed (apt-get install redis-tools)"

if [[ "${1:-start}" == stop ]]; then
    for p in "${PORTS[@]}"; do
        if answers "$p"; then
            redis-cli -h "$HOST" -p "$p" shutdown nosave >/dev/null 2>&1 || true
            log "stopped $HOST:$p"
        fi
    done
    exit 0
fi
[[ "${1:-start}" == start ]] || die "usage: $0 [start|stop]"

mkdir -p "$DIR"
running=0
for p in "${PORTS[@]}"; do
    if answers "$p"; then running=$((running + 1)); fi
done
if ((running == 0)); then
    # a fresh start: forget any cluster an earlier run left in its node files
    rm -f "$DIR"/nodes-*.conf
fi

for p in "${PORTS[@]}"; do
    if answers "$p"; then
        redis-cli -h "$HOST" -p "$p" info cluster 2>/dev/null | grep -q '^cluster_enabled:1' ||
            die "$HOST:$p answers but is not a cluster node; free the port or set other ports"
        continue
    fi
    log "starting redis-server on $HOST:$p"
    redis-server --port "$p" --bind "$HOST" --cluster-enabled yes \
        --cluster-config-file "$DIR/nodes-$p.conf" --save "" --appendonly no \
        --daemonize yes --dir "$DIR" --logfile "$DIR/redis-$p.log" \
        --pidfile "$DIR/redis-$p.pid"
done

for p in "${PORTS[@]}"; do
    for _ in $(seq 100); do answers "$p" && break; sleep 0.1; done
    answers "$p" || die "$HOST:$p did not start; see $DIR/redis-$p.log"
done

assigned="$(info_field "${PORTS[0]}" cluster_slots_assigned)"
known="$(info_field "${PORTS[0]}" cluster_known_nodes)"
if [[ "$assigned" == 16384 && "$known" -ge "${#PORTS[@]}" ]]; then
    log "cluster already formed"
elif [[ "$assigned" == 0 ]]; then
    log "creating the cluster"
    nodes=()
    for p in "${PORTS[@]}"; do nodes+=("$HOST:$p"); done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >&2
else
    die "the nodes hold a partial cluster ($assigned slots, $known nodes known); run '$0 stop' and start again"
fi

for p in "${PORTS[@]}"; do
    for _ in $(seq 300); do
        [[ "$(info_field "$p" cluster_state)" == ok ]] && break
        sleep 0.1
    done
    [[ "$(info_field "$p" cluster_state)" == ok ]] || die "cluster_state is not ok on $HOST:$p"
done
log "cluster_state:ok on ${PORTS[*]}"

urls=()
for p in "${PORTS[@]}"; do urls+=("redis://$HOST:$p"); done
(IFS=,; echo "export IDEMGATE_TEST_REDIS_CLUSTER_URLS=${urls[*]}")
