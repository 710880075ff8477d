-- Tollgate reservation: the limits of one descriptor that names a reservation, reserved or
-- settled in one call with the reservation's record (README.md, "Reservations"). The same
-- function as src/algorithm/reservation.rs, kept equal by tests/differential.rs.
-- KEYS: the group's distinct buckets (one slot in a cluster), then the record hash R and
-- its expiry set X (both under the first bucket's hash tag).
-- ARGV[1] id (the reservation's keyed id), ARGV[2] ttl_us, ARGV[3] now_us (tests only; ''
-- in production), ARGV[4] m, then 8 per member as joint.lua's.
-- Reply: flat, three entries per member (allowed, remaining, reset_us), then the phase
-- (0 plain, 1 reserved, 2 refused, 3 settled) and how many reservations this call found
-- expired unsettled.

-- Expired records removed per call at most: a call's cost stays bounded however many
-- reservations were abandoned (the rest go with later calls, or with the keys' expiry).
local SWEEP = 16

local nkeys = #KEYS - 2
local R, X = KEYS[nkeys + 1], KEYS[nkeys + 2]
local id, ttl = ARGV[1], int(ARGV[2])
local m = int(ARGV[4])
if nkeys < 1 or m < 1 or #ARGV < 4 + 8 * m then
  return redis.error_reply('ERR tollgate: reserve: KEYS must hold the buckets, R and X; ARGV id, ttl, now, m, members')
end
local members, bad = parse_members(4, m, nkeys)
if not members then return bad end
local now = clock(ARGV[3])

-- A held record: 'H', then ':<n>:<window start>' per member; a settled or refused one: 'D'.
local function held(v)
  return v and string.sub(v, 1, 1) == 'H'
end

-- Expired records go (bounded), those still held are counted; so does this call's own.
local expired = 0
local function drop(f)
  if held(redis.call('HGET', R, f)) then expired = expired + 1 end
  redis.call('HDEL', R, f)
  redis.call('ZREM', X, f)
end
for _, f in ipairs(redis.call('ZRANGEBYSCORE', X, '-inf', str(now), 'LIMIT', 0, SWEEP)) do drop(f) end
local record = redis.call('HGET', R, id) or nil
if record then
  local at = redis.call('ZSCORE', X, id)
  if not at or int(at) <= now then
    drop(id)
    record = nil
  end
end

-- The window a member's reservation was taken in: a window's start, 0 for GCRA (its
-- refunds never depend on one).
local function window(member)
  if member.algorithm.kind == 'g' then return 0 end
  return now - (now - div(now, member.unit) * member.unit)
end

local function hits(member)
  if member.mode == 0 or member.mode == 3 then return member.n end
  return 0
end

local phase, write = 0, nil
-- A record settled or refused (anything but a held one): a plain call.
local plain = record ~= nil and not held(record)
local any = false
for _, member in ipairs(members) do
  if member.mode == 2 then plain = true end
  if hits(member) > 0 then any = true end
end
if not record and not any then plain = true end

local stored, read = read_members(members, now)
local replies, writes, passed
if plain then
  replies, writes = group(members, stored, now, false)
elseif record then
  -- Settle: each limit on its own, the difference to what it holds refunded (the same
  -- window only) or overdrawn (whatever the limit's overdraft says, within its cap).
  local parts = {}
  for part in string.gmatch(record, ':(%d+)') do parts[#parts + 1] = int(part) end
  for i, member in ipairs(members) do
    local n, w = parts[2 * i - 1] or 0, parts[2 * i]
    local used = hits(member)
    if used > n then
      member.mode, member.n = 3, used - n
    elseif used < n and w == window(member) then
      member.mode, member.n = 2, n - used
    else
      member.mode, member.n = 1, 0
    end
  end
  replies, writes = group(members, stored, now, true)
  phase, write = 3, 'D'
else
  -- Reserve: every limit's consume of its hits, all or nothing.
  local record_of = {'H'}
  for _, member in ipairs(members) do
    if member.mode == 3 then member.mode = 0 end
    record_of[#record_of + 1] = ':' .. str(hits(member)) .. ':' .. str(window(member))
  end
  replies, writes, passed = group(members, stored, now, false)
  if passed then phase, write = 1, table.concat(record_of) else phase, write = 2, 'D' end
end

for k, w in pairs(writes) do
  put(KEYS[k], w, read[k] == 'g', stored[k])
end
if write then
  local at = add(now, ttl)
  redis.call('HSET', R, id, write)
  redis.call('ZADD', X, str(at), id)
  -- The record keys outlive their latest record by one ttl, for the calls that count it.
  local last = redis.call('ZRANGE', X, -1, -1, 'WITHSCORES')
  local expiry = ms_ceil(add(int(last[2]), ttl))
  redis.call('PEXPIREAT', R, expiry)
  redis.call('PEXPIREAT', X, expiry)
end

local out = {}
for i, reply in ipairs(replies) do
  out[3 * i - 2], out[3 * i - 1], out[3 * i] = reply[1], reply[2], reply[3]
end
out[#out + 1] = phase
out[#out + 1] = expired
return out
