-- admin_delete: an operator's override (`idemgate release`): delete the record whatever its
-- state, lease or fence, if it is still exactly the one the operator was shown.
-- KEYS[1] record key; ARGV 1 principal  2 route  3 key  4 state  5 fence  6 lease token
-- 7 lease expiry  8 created  9 expires: as read by the client, '' when absent or unreadable.
-- Returns 1 when deleted, 0 when the record changed or is gone (nothing changed).
local f = redis.call('HMGET', KEYS[1], 'p', 'r', 'k', 'st', 'fe', 'lt', 'le', 'ca', 'ex')
for i = 1, 3 do
  if f[i] ~= ARGV[i] then
    return 0
  end
end
if (f[4] or '') ~= ARGV[4] then
  return 0
end
for i = 5, 9 do
  if decimal(f[i]) ~= ARGV[i] then
    return 0
  end
end
redis.call('DEL', KEYS[1])
return 1
