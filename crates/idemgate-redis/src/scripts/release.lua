-- release: delete an in_progress record whose operation did not run, if the lease is held.
-- KEYS[1] record key; ARGV 1 fence  2 lease token  3 confirm: "1" when the caller waits for
-- replicas (WAIT) after the write, else "0"  4, 5 (optional) channel and key event
-- Returns 1; 2 when confirm is "1" and there is no record (an earlier attempt deleted it, or
-- it is gone anyway: either way no record holds the key, which is what release is for);
-- 0 when the lease is not held (nothing changed).
if not held(KEYS[1], ARGV[1], ARGV[2]) then
  if ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
    return 2
  end
  return 0
end
redis.call('DEL', KEYS[1])
announce(4)
return 1
