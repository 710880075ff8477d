-- Tollgate groups, written once: a group of members decided at one instant, all or nothing
-- (a joint group) or each on its own (a coalesced batch's `each` mode). joint.lua and
-- reserve.lua are built with this file after every algorithm file and penalty.lua. The
-- same function as src/algorithm/joint.rs, kept equal by tests/differential.rs.

-- Each algorithm by its name in a call, with the kind of state it reads.
local ALGORITHMS = {
  gcra = {run = gcra, kind = 'g', code = 'g'},
  sliding_window = {run = sliding, kind = 'w', code = 's'},
  fixed_window = {run = fixed, kind = 'w', code = 'f'},
  calendar_window = {run = calendar, kind = 'w', code = 'c'},
}

-- The m members at ARGV[a + 1 ..] (8 arguments each: key index, algorithm, limit, unit_us,
-- burst, mode, n, penalty_us), checked before anything is read: the members, or nil and
-- the error reply.
local function parse_members(a, m, nkeys)
  local members = {}
  for i = 1, m do
    local b = a + 8 * (i - 1)
    local member = {
      key = int(ARGV[b + 1]), algorithm = ALGORITHMS[ARGV[b + 2]], limit = int(ARGV[b + 3]),
      unit = math.max(int(ARGV[b + 4]), 1), burst = int(ARGV[b + 5]), mode = int(ARGV[b + 6]),
      n = int(ARGV[b + 7]), penalty = int(ARGV[b + 8]),
    }
    if member.key < 1 or member.key > nkeys then
      return nil, redis.error_reply('ERR tollgate: joint: key index out of range')
    end
    if not member.algorithm then
      return nil, redis.error_reply('ERR tollgate: joint: unknown algorithm')
    end
    if member.mode > 3 then
      return nil, redis.error_reply(BAD_MODE)
    end
    members[i] = member
  end
  return members
end

-- Reads each key of the members once, as the algorithm of its first member stores it (the
-- key's tag names the algorithm: one key never holds two). Anything unreadable is no
-- state; a window with its window keys' counts at now (fold, prelude.lua). The states by
-- key index, and how each was read.
local function read_members(members, now)
  local stored, read = {}, {}
  for _, member in ipairs(members) do
    local k = member.key
    if not read[k] then
      read[k] = member.algorithm.kind
      stored[k] = read_state(KEYS[k], read[k], now, member.unit, member.algorithm.code)
    end
  end
  return stored, read
end

-- Decides the members in order over a scratch copy of stored: a key met twice sees the
-- earlier member. each: independent members (a denial vetoes nobody). Returns the replies
-- ({allowed, remaining, reset_us} per member), what to write by key index (put's write),
-- and whether every member passed. A joint group that did not pass writes nothing but the
-- penalties its denials started (each bucket as stored, marked; the latest end when
-- several members of one bucket breached), and its other members describe their bucket
-- as stored, allowed.
local function group(members, stored, now, each)
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
  if passed or each then return replies, writes, passed end
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
  return replies, marks, false
end
