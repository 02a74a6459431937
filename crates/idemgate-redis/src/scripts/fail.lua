-- fail: in_progress -> failed, if the lease is held.
-- KEYS[1] record key; ARGV 1 fence  2 lease token  3 confirm: "1" when the caller waits for
-- replicas (WAIT) after the write, else "0"  4, 5 (optional) channel and key event
-- Returns 1; 2 when confirm is "1" and this lease's failure is already stored (an earlier
-- attempt landed; see `rewritten`); 0 when the lease is not held (nothing changed).
local now = held(KEYS[1], ARGV[1], ARGV[2])
if not now then
  return rewritten(KEYS[1], ARGV[3], 'failed', ARGV[1], ARGV[2])
end
redis.call('HDEL', KEYS[1], 'lt', 'le')
redis.call('HSET', KEYS[1], 'st', 'failed', 'co', int(now), 'ot', ARGV[2])
announce(4)
return 1
