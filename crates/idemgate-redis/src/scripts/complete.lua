-- complete: in_progress -> completed with the response and its checksum, if the record
-- still has the lease's fence and token (whether or not the lease itself lapsed).
-- KEYS[1] record key
-- ARGV 1 fence  2 lease token  3 status  4 encoded headers  5 body (stored even when empty)
--      6 replayable "1"/"0"  7 checksum (32 bytes)  8 confirm: "1" when the caller waits for
--      replicas (WAIT) after the write, else "0"  9 key id of a sealed response, "" in clear
--      10, 11 (optional) channel and key event
-- Returns 1; 2 when confirm is "1" and this lease's completion is already stored (an earlier
-- attempt landed; see `rewritten`); 0 when the lease is stale (nothing changed).
local now = held(KEYS[1], ARGV[1], ARGV[2])
if not now then
  return rewritten(KEYS[1], ARGV[8], 'completed', ARGV[1], ARGV[2])
end
redis.call('HDEL', KEYS[1], 'lt', 'le')
redis.call('HSET', KEYS[1], 'st', 'completed', 'co', int(now), 'rs', ARGV[3],
  'rh', ARGV[4], 'rb', ARGV[5], 'rr', ARGV[6], 'cs', ARGV[7], 'ot', ARGV[2])
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'ki', ARGV[9])
end
announce(10)
return 1
