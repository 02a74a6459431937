# A three-node Redis Cluster on loopback ports 7101-7103, for the Redis store's cluster tests.
# A cluster this run started is stopped when the run ends; one that was already running is
# left as it was.
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  cluster_was_running=0
  redis-cli -h 127.0.0.1 -p 7101 ping 2>/dev/null | grep -q PONG && cluster_was_running=1
  if cluster_env="$(crates/idemgate-redis/scripts/start-cluster.sh)"; then
    eval "$cluster_env"
    if [ "$cluster_was_running" = 0 ]; then
      trap 'crates/idemgate-redis/scripts/start-cluster.sh stop' EXIT
    fi
  else
    echo "scripts/test: the Redis Cluster did not start; its tests will fail" >&2
  fi
fi
