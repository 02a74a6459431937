-- insert_or_get: insert the record in_progress under a new lease if the key holds no live
-- record; otherwise return the stored record untouched. No rule is applied here: what a live
-- record means is for the core's engine to judge.
--
-- KEYS[1] record key
-- ARGV  1 principal  2 route  3 idempotency key  4 fingerprint version  5 digest (32 bytes)
--       6 lease token  7 lease ttl ms  8 record ttl ms
--
-- Returns {1, now, fence, lease_expires_at} when the record was inserted, or
-- {0, now, {value, ...}} with the stored record otherwise: the values of the fields of
-- `common.lua`, in that order (HMGET; false, a nil reply, for a field not set). A record past
-- its expires_at (Redis has not dropped the key yet) is replaced with its fence + 1. A
-- record this script cannot read (missing or non-numeric expiry or fence, another scope)
-- is returned as stored, never overwritten: the client reports it as corrupt.

local key = KEYS[1]
local now = now_ms()
local fence = 1

if redis.call('EXISTS', key) == 1 then
  -- one read of every field: a live record (a replay, a 409) is returned from it as it is
  local c = redis.call('HMGET', key, 'p', 'r', 'k', 'fv', 'fd', 'st', 'fe', 'lt', 'le', 'ca',
    'co', 'ex', 'rs', 'rh', 'rb', 'rr', 'cs', 'ki')
  local fe, ex = tonumber(c[7]), tonumber(c[12])
  if ex == nil or now < ex or fe == nil
      or c[1] ~= ARGV[1] or c[2] ~= ARGV[2] or c[3] ~= ARGV[3] then
    return {0, now, c}
  end
  -- expired by TTL: nothing of the old record survives, and no old lease matches again
  fence = fe + 1
  redis.call('DEL', key)
end

-- a record never expires under a live lease
local lease_end = now + tonumber(ARGV[7])
local ex = math.max(now + tonumber(ARGV[8]), lease_end)
redis.call('HSET', key, 'p', ARGV[1], 'r', ARGV[2], 'k', ARGV[3], 'fv', ARGV[4],
  'fd', ARGV[5], 'st', 'in_progress', 'fe', int(fence), 'lt', ARGV[6],
  'le', int(lease_end), 'ca', int(now), 'ex', int(ex))
redis.call('PEXPIREAT', key, int(ex))
return {1, now, fence, lease_end}
