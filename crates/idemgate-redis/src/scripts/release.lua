-- release: delete an in_progress record whose operation did not run, if the lease is held.
-- KEYS[1] record key; ARGV 1 fence  2 lease token
-- Returns 1, or 0 when the lease is not held (nothing changed).
if not held(KEYS[1], ARGV[1], ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
