-- complete: in_progress -> completed with the response, if the lease is held.
-- KEYS[1] record key
-- ARGV 1 fence  2 lease token  3 status  4 encoded headers  5 body  6 replayable "1"/"0"
-- Returns 1, or 0 when the lease is not held (nothing changed).
local now = held(KEYS[1], ARGV[1], ARGV[2])
if not now then
  return 0
end
redis.call('HDEL', KEYS[1], 'lt', 'le')
redis.call('HSET', KEYS[1], 'st', 'completed', 'co', int(now), 'rs', ARGV[3],
  'rh', ARGV[4], 'rb', ARGV[5], 'rr', ARGV[6])
return 1
