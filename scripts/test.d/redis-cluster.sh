# A three-node Redis Cluster on loopback ports 7101-7103, for the Redis store's cluster tests.
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  if cluster_env="$(crates/idemgate-redis/scripts/start-cluster.sh)"; then
    eval "$cluster_env"
  else
    echo "scripts/test: the Redis Cluster did not start; its tests will fail" >&2
  fi
fi
