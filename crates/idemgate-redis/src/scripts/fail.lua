-- fail: in_progress -> failed, if the lease is held.
-- KEYS[1] record key; ARGV 1 fence  2 lease token
-- Returns 1, or 0 when the lease is not held (nothing changed).
local now = held(KEYS[1], ARGV[1], ARGV[2])
if not now then
  return 0
end
redis.call('HDEL', KEYS[1], 'lt', 'le')
redis.call('HSET', KEYS[1], 'st', 'failed', 'co', int(now))
return 1
