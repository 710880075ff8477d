-- Tollgate joint charge: a group of members decided at one instant that stand or fall
-- together. The same function as src/algorithm/joint.rs, kept equal by
-- tests/differential.rs; each member is decided by its algorithm's function in
-- algorithm/ (the very one gcra.lua, sliding_window.lua and fixed_window.lua call), over a
-- scratch copy of the decoded states. Contract (KEYS, ARGV, reply, storage): README.md in
-- this folder.
-- KEYS: the group's distinct buckets (one slot in a cluster).
-- ARGV[1] = m, the number of members; then 8 per member: key index (1-based into KEYS),
-- algorithm (gcra | sliding_window | fixed_window), limit, unit_us, burst, mode, n,
-- penalty_us (0: none); then, tests only, now_us (ARGV[2 + 8m]; '' in production when the
-- next argument follows); then, optional, ARGV[3 + 8m] = '1': the members are independent
-- (a coalesced batch on one key): each is applied if it fits, and a denial vetoes no other
-- member.
-- Reply: one {allowed 0|1, remaining, reset_us} per member, in order.

-- Each algorithm by its name in the call, with the kind of state it reads.
local ALGORITHMS = {
  gcra = {run = gcra, kind = 'g', code = 'g'},
  sliding_window = {run = sliding, kind = 'w', code = 's'},
  fixed_window = {run = fixed, kind = 'w', code = 'f'},
  calendar_window = {run = calendar, kind = 'w', code = 'c'},
}

-- Parse and check every member before touching anything.
local m = int(ARGV[1])
if m < 1 or #ARGV < 1 + 8 * m then
  return redis.error_reply('ERR tollgate: joint: ARGV must hold m, then 8 arguments per member')
end
local members = {}
for i = 1, m do
  local a = 1 + 8 * (i - 1)
  local member = {
    key = int(ARGV[a + 1]), algorithm = ALGORITHMS[ARGV[a + 2]], limit = int(ARGV[a + 3]),
    unit = math.max(int(ARGV[a + 4]), 1), burst = int(ARGV[a + 5]), mode = int(ARGV[a + 6]),
    n = int(ARGV[a + 7]), penalty = int(ARGV[a + 8]),
  }
  if member.key < 1 or member.key > #KEYS then
    return redis.error_reply('ERR tollgate: joint: key index out of range')
  end
  if not member.algorithm then
    return redis.error_reply('ERR tollgate: joint: unknown algorithm')
  end
  if member.mode > 3 then
    return redis.error_reply(BAD_MODE)
  end
  members[i] = member
end

-- The clock, with the test-only fake time after the members.
local now = clock(ARGV[2 + 8 * m])

-- Independent members (a coalesced batch): no all-or-nothing.
local each = ARGV[3 + 8 * m] == '1'

-- Read each key once, as the algorithm of its first member stores it (the key's tag names
-- the algorithm: one key never holds two). Anything unreadable is no state, as in the
-- single scripts.
local stored = {}
local read = {}
for _, member in ipairs(members) do
  local k = member.key
  if not read[k] then
    read[k] = member.algorithm.kind
    stored[k] = read_state(KEYS[k], read[k])
  end
end

-- Decide in order over a scratch copy: a key met twice sees the earlier member. A denied
-- member writes nothing, so with independent members the next one sees the key as if the
-- denied one had not come: the answers of single calls in this order at this instant.
local scratch, writes = {}, {}
for k, st in pairs(stored) do scratch[k] = st end
local replies, passed, breached = {}, true, {}
for i, member in ipairs(members) do
  local k = member.key
  local a = member.algorithm
  local allowed, remaining, reset, write =
    charge(a.run, a.code, scratch[k], now, member.limit, member.unit, member.burst, member.mode, member.n, member.penalty)
  -- A denial that writes started a penalty (algorithm/penalty.lua).
  breached[i] = allowed == 0 and write ~= nil
  if write ~= nil then
    writes[k] = write
    scratch[k] = write or nil
  end
  -- An overdraw past its limit vetoes nothing: its usage counts whatever it answers.
  if allowed == 0 and member.mode ~= 3 then passed = false end
  replies[i] = {allowed, remaining, reset}
end

if not passed and not each then
  -- Nothing is written but the penalties the denials started (each bucket as stored,
  -- marked; the latest end when several members of one bucket breached): the others
  -- describe their bucket as stored, allowed.
  local marks = {}
  for i, member in ipairs(members) do
    local k, a = member.key, member.algorithm
    if replies[i][1] == 1 then
      local _, remaining, reset =
        charge(a.run, a.code, stored[k], now, member.limit, member.unit, member.burst, 1, 0, member.penalty)
      replies[i] = {1, remaining, reset}
    elseif breached[i] then
      local mark = penalty_mark(stored[k], now, a.code, member.unit, add(now, member.penalty))
      if not marks[k] or marks[k].u < mark.u then marks[k] = mark end
    end
  end
  for k, mark in pairs(marks) do put(KEYS[k], mark, read[k] == 'g', stored[k]) end
  return replies
end

-- Each key's final state, once; a window over a key read as GCRA replaces the string.
for k, write in pairs(writes) do
  put(KEYS[k], write, read[k] == 'g', stored[k])
end
return replies
