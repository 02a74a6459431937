-- get: the stored record and the server time, read together.
-- KEYS[1] record key
-- Returns {now, {field, value, ...}} (an empty list when there is no record); the client
-- treats a record with now >= ex as absent.
return {now_ms(), redis.call('HGETALL', KEYS[1])}
