-- acquire: insert the record in_progress, or take it over, by the rules of
-- idemgate_core::engine::decide / apply_acquire; otherwise return it untouched.
-- expires_at is never earlier than the lease's end (insert: max(now + record ttl, lease
-- end); takeover: the old expires_at, pushed to the new lease's end if earlier).
--
-- KEYS[1] record key
-- ARGV  1 principal  2 route  3 idempotency key  4 fingerprint version  5 digest (32 bytes)
--       6 lease token  7 lease ttl ms  8 record ttl ms  9 max lease ms
--       10 retry_failed "1"/"0"  11 takeover on expired lease "1"/"0"
--
-- Returns {1, now, fence, lease_expires_at, takeover 0/1} when this request now owns the
-- record, or {0, now, {field, value, ...}} with the stored record (HGETALL) otherwise.
-- A record this script cannot read (missing or non-numeric fence, expiry or creation
-- time, another scope) is returned as stored, never overwritten: the client reports it
-- as corrupt.

local key = KEYS[1]
local now = now_ms()

local function existing()
  return {0, now, redis.call('HGETALL', key)}
end

local fence = 1
local takeover = false
local old_ex
local exists = redis.call('EXISTS', key) == 1
if exists then
  local c = redis.call('HMGET', key, 'p', 'r', 'k', 'fv', 'fd', 'st', 'fe', 'le', 'ca', 'ex')
  local fe, ex = tonumber(c[7]), tonumber(c[10])
  if fe == nil or ex == nil or c[1] ~= ARGV[1] or c[2] ~= ARGV[2] or c[3] ~= ARGV[3] then
    return existing()
  end
  old_ex = ex
  if now < ex then
    -- live: a different fingerprint never runs, whatever the state
    if c[4] ~= ARGV[4] or c[5] ~= ARGV[5] then
      return existing()
    end
    if c[6] == 'failed' and ARGV[10] == '1' then
      takeover = true
    elseif c[6] == 'in_progress' then
      local lease_end = tonumber(c[8])
      if lease_end == nil then
        -- a missing or unreadable lease counts as held until created_at + max lease
        local ca = tonumber(c[9])
        if ca == nil then
          return existing()
        end
        lease_end = ca + tonumber(ARGV[9])
      end
      if now < lease_end or ARGV[11] ~= '1' then
        return existing()
      end
      takeover = true
    else
      -- completed, failed without retry, or an unknown state
      return existing()
    end
  end
  -- expired by TTL (Redis has not dropped the key yet) or taken over: fence + 1
  fence = fe + 1
end

local lease_end = now + tonumber(ARGV[7])
if takeover then
  -- same fingerprint and created_at; expires_at only moves to cover the new lease
  redis.call('HDEL', key, 'co', 'rs', 'rh', 'rb', 'rr')
  redis.call('HSET', key, 'st', 'in_progress', 'fe', int(fence), 'lt', ARGV[6],
    'le', int(lease_end))
  cover_lease(key, old_ex, lease_end)
  return {1, now, fence, lease_end, 1}
end

-- a record never expires under a live lease
local ex = math.max(now + tonumber(ARGV[8]), lease_end)
if exists then
  -- expired by TTL: nothing of the old record may survive
  redis.call('DEL', key)
end
redis.call('HSET', key, 'p', ARGV[1], 'r', ARGV[2], 'k', ARGV[3], 'fv', ARGV[4],
  'fd', ARGV[5], 'st', 'in_progress', 'fe', int(fence), 'lt', ARGV[6],
  'le', int(lease_end), 'ca', int(now), 'ex', int(ex))
redis.call('PEXPIREAT', key, int(ex))
return {1, now, fence, lease_end, 0}
