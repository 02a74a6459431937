-- renew: extend a held lease to now + ttl, and the record's expires_at (field and
-- PEXPIREAT) to at least that: a record never expires under a live lease.
-- KEYS[1] record key; ARGV 1 fence  2 lease token  3 lease ttl ms
-- Returns the new lease expiry (ms), or 0 when the lease is not held.
local now, ex = held(KEYS[1], ARGV[1], ARGV[2])
if not now then
  return 0
end
local lease_end = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'le', int(lease_end))
cover_lease(KEYS[1], ex, lease_end)
return lease_end
