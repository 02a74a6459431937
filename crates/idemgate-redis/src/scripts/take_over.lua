-- take_over: compare-and-set on a snapshot the client read. If the record still has the
-- snapshot's state, fence, lease token and lease expiry (an empty argument: the field is
-- absent or unreadable) and is not past expires_at, it becomes in_progress with fence + 1
-- under the new lease; the response fields and the outcome's token go, fingerprint and
-- created_at stay, and expires_at (field and PEXPIREAT) moves to at least the new lease's end.
--
-- KEYS[1] record key
-- ARGV 1 state  2 fence  3 lease token or ''  4 lease expiry or ''  5 new lease token
--      6 lease ttl ms
-- Returns {fence, lease_expires_at}, or 0 when the record changed or is gone.

local key = KEYS[1]
local f = redis.call('HMGET', key, 'st', 'fe', 'lt', 'le', 'ex')
local now = now_ms()
local ex = tonumber(f[5])
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] or ex == nil or now >= ex
    or decimal(f[3]) ~= ARGV[3] or decimal(f[4]) ~= ARGV[4] then
  return 0
end

local fence = tonumber(f[2]) + 1
local lease_end = now + tonumber(ARGV[6])
redis.call('HDEL', key, 'co', 'rs', 'rh', 'rb', 'rr', 'cs', 'ki', 'ot')
redis.call('HSET', key, 'st', 'in_progress', 'fe', int(fence), 'lt', ARGV[5],
  'le', int(lease_end))
cover_lease(key, ex, lease_end)
return {fence, lease_end}
