-- Who holds one RLQS bucket, fleet-wide: the claims ledger of `store/rlqs.rs`. One hash per
-- bucket; a field per holder (an Envoy, by the name its stream gives), its value
-- "demand newcomer live claim expires instance" (integers, expires the server's TIME in ms;
-- instance: the Tollgate instance holding its stream, where a push for it goes).
--
-- KEYS[1]: the ledger hash. ARGV: the holder; its demand; newcomer (0|1); live (0|1: its
-- stream is open); its claim (-1 keeps the one recorded, 0 when none); how long the entry is
-- kept from now (ms: the assignment's TTL and a margin, so that a claim lives as long as the
-- Envoy may spend it); the instance holding its stream.
--
-- Drops expired entries, writes this holder's, and returns {claim, field, demand, newcomer,
-- live, claim, instance, ...}: this holder's claim as written, then every other holder still held.
-- The hash expires with its last entry.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, keep, claim = ARGV[1], tonumber(ARGV[6]), tonumber(ARGV[5])
local latest = now + keep
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local field, value = all[i], all[i + 1]
  local d, n, l, c, e, inst = string.match(value, '^(%d+) (%d) (%d) (%d+) (%d+) ?(%S*)$')
  local expires = tonumber(e)
  if not expires or expires <= now then
    redis.call('HDEL', KEYS[1], field)
  elseif field == me then
    if claim < 0 then
      claim = tonumber(c)
    end
  else
    out[#out + 1] = field
    out[#out + 1] = tonumber(d)
    out[#out + 1] = tonumber(n)
    out[#out + 1] = tonumber(l)
    out[#out + 1] = tonumber(c)
    out[#out + 1] = inst
    if expires > latest then
      latest = expires
    end
  end
end
if claim < 0 then
  claim = 0
end
local entry = string.format('%d %d %d %d %d %s', tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), claim, now + keep, ARGV[7])
redis.call('HSET', KEYS[1], me, entry)
redis.call('PEXPIREAT', KEYS[1], latest)
table.insert(out, 1, claim)
return out
