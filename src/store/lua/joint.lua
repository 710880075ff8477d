-- Tollgate joint charge: a group of members decided at one instant that stand or fall
-- together. The same function as src/algorithm/joint.rs, kept equal by
-- tests/differential.rs; the group is decided by group.lua over the algorithms of
-- algorithm/ (the very ones gcra.lua, sliding_window.lua and fixed_window.lua call).
-- Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- KEYS: the group's distinct buckets (one slot in a cluster).
-- ARGV[1] = m, the number of members; then 8 per member: key index (1-based into KEYS),
-- algorithm (gcra | sliding_window | fixed_window), limit, unit_us, burst, mode, n,
-- penalty_us (0: none); then, tests only, now_us (ARGV[2 + 8m]; '' in production when the
-- next argument follows); then, optional, ARGV[3 + 8m] = '1': the members are independent
-- (a coalesced batch on one key): each is applied if it fits, and a denial vetoes no other
-- member.
-- Reply: one {allowed 0|1, remaining, reset_us} per member, in order.

local m = int(ARGV[1])
if m < 1 or #ARGV < 1 + 8 * m then
  return redis.error_reply('ERR tollgate: joint: ARGV must hold m, then 8 arguments per member')
end
local members, bad = parse_members(1, m, #KEYS)
if not members then return bad end

-- The clock, with the test-only fake time after the members.
local now = clock(ARGV[2 + 8 * m])

-- Independent members (a coalesced batch): no all-or-nothing.
local each = ARGV[3 + 8 * m] == '1'

local stored, read = read_members(members, now)
local replies, writes = group(members, stored, now, each)

-- Each key's final state (or a denied group's penalty marks), once; a window over a key
-- read as GCRA replaces the string.
for k, write in pairs(writes) do
  put(KEYS[k], write, read[k] == 'g', stored[k])
end
return replies
