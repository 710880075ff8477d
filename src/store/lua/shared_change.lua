-- One change of one scope of a shared record hash — the incident switch's (the store's
-- `shared.rs` sends it; `sources/overrides/stored.rs` makes the records) — taken only
-- over the version of the scope its instance last read: a change that waited out a
-- partition never undoes one made since through another instance.
--
-- KEYS[1]: the hash. ARGV: the scope; the change's id; its base (the scope's version the
-- instance last read, 0 when the scope had no record); the change's record, a JSON object
-- without `version`; how long a record is kept after its version (ms); the longest TTL (ms).
--
-- Returns {1, version} when the hash holds the change (now, or already: the replay of a
-- write whose reply was lost), {0, version} when the scope is at another version (refused).
-- A version is the server's TIME in ms when the scope last changed, and grows by 1 at least
-- per change of the scope: the clocks of the instances play no part.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local scope, id, base = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keep, longest = tonumber(ARGV[5]), tonumber(ARGV[6])

local function decode(text)
  local ok, o = pcall(cjson.decode, text)
  if ok and type(o) == 'table' then
    return o
  end
  return nil
end

-- A record without a version (an older release's, or written by hand) is version 0.
local version = 0
local current = redis.call('HGET', KEYS[1], scope)
if current then
  local o = decode(current)
  if o then
    if o.id == id then
      return {1, tonumber(o.version) or 0}
    end
    version = tonumber(o.version) or 0
  end
end
if version ~= base then
  return {0, version}
end
local new = math.max(now, version + 1)
-- The record as the instance wrote it, its version first (no re-encoding: cjson would round
-- the numbers to 14 digits).
redis.call('HSET', KEYS[1], scope, '{"version":' .. string.format('%d', new) .. ',' .. string.sub(ARGV[4], 2))

-- A record is kept `keep` after its version (longer than any change still pending can
-- wait), the old form until its end (at most the longest TTL after it was set); the hash
-- expires with the last record kept.
local last = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local o = decode(all[i + 1])
  local ends = 0
  if o then
    local v = tonumber(o.version)
    if v then
      ends = v + keep
    else
      ends = math.min(tonumber(o.expires_at_ms) or 0, (tonumber(o.set_at_ms) or 0) + longest)
    end
  end
  if ends <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif ends > last then
    last = ends
  end
end
if last > 0 then
  redis.call('PEXPIREAT', KEYS[1], last)
end
return {1, new}
