-- Prepended to every idemgate script (see scripts.rs). One record is one Redis hash at
-- KEYS[1]; every time is an integer in ms since the Unix epoch by the server's clock.
--
-- Fields: p r k (principal, route, key), fv fd (fingerprint version, 32-byte digest),
-- st (in_progress | completed | failed), fe (fence), lt le (lease token, lease expiry),
-- ca co ex (created, completed, expires), rs rh rb rr cs (status, encoded headers, body,
-- replayable "1"/"0", 32-byte response checksum; records written before checksums have no
-- cs), ki (the key id of a sealed response, idemgate_core::seal; none in clear), ot (on completed and failed records: the lease token that wrote the outcome, so a
-- retry of that same write is told from a stale lease; records written before it have
-- none). The key expires by itself at `ex` (PEXPIREAT).

-- Redis 3.2 to 4: replicate the writes, not the script (TIME makes it non-deterministic).
-- A no-op from Redis 5 on, where effects replication is the default (the only mode in 7).
if redis.replicate_commands then
  redis.replicate_commands()
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as decimal strings (tostring would switch to exponents past 14 digits).
local function int(n)
  return string.format('%d', n)
end

-- The server time and the record's expires_at if the record at `key` is live (before
-- expires_at), in_progress and owned by (fence, token), both given as decimal strings;
-- false otherwise. The lease's own expiry is not checked: a late outcome of a live fence
-- lands.
local function held(key, fence, token)
  local f = redis.call('HMGET', key, 'st', 'fe', 'lt', 'ex')
  local now = now_ms()
  if f[1] ~= 'in_progress' or f[2] ~= fence or f[3] ~= token then
    return false
  end
  local ex = tonumber(f[4])
  if ex == nil or now >= ex then
    return false
  end
  return now, ex
end

-- A field value as the client reads an integer: the decimal string, or '' when the field
-- is absent or not a decimal integer (the client's None).
local function decimal(v)
  if type(v) == 'string' and string.match(v, '^%-?%d+$') then
    return v
  end
  return ''
end

-- A record never expires under a live lease: pushes expires_at (field and PEXPIREAT) to
-- at least `lease_end` when it is earlier.
local function cover_lease(key, ex, lease_end)
  if ex < lease_end then
    redis.call('HSET', key, 'ex', int(lease_end))
    redis.call('PEXPIREAT', key, int(lease_end))
  end
end

-- After a refused compare-and-set of an outcome write (complete, fail): 2 when `confirm` is
-- '1' (the caller waits for replicas after the write) and the live record already holds
-- outcome `state` written by (fence, token), i.e. an earlier attempt of this same write
-- landed; its `ot` is then written again (the same value: a write replicated after that
-- attempt, so the caller's WAIT covers the attempt too). 0 otherwise: the lease is stale.
local function rewritten(key, confirm, state, fence, token)
  if confirm ~= '1' then
    return 0
  end
  local f = redis.call('HMGET', key, 'st', 'fe', 'ot', 'ex')
  local ex = tonumber(f[4])
  if f[1] ~= state or f[2] ~= fence or f[3] ~= token or ex == nil or now_ms() >= ex then
    return 0
  end
  redis.call('HSET', key, 'ot', token)
  return 2
end

-- Publishes ARGV[i + 1] on the channel ARGV[i] when the caller passed them (a route whose
-- duplicates wait, `write_announced`): the key event leaves with the write, in one round trip.
local function announce(i)
  if ARGV[i] then
    redis.call('PUBLISH', ARGV[i], ARGV[i + 1])
  end
end
