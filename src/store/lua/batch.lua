-- Tollgate batch: the charges of several requests queued for one server, in one call
-- (src/store/redis/batch.rs). Each group is decided on its own, in order, at one instant,
-- exactly as if each had been its own call at that instant: a joint group all or nothing
-- (joint.lua's semantics), an independent group each member on its own (joint.lua's
-- `each` mode; a single charge is an independent group of one). A key met again in a later
-- group sees the earlier groups' effects. Each algorithm is the single scripts' own
-- function in algorithm/. Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- KEYS: the distinct buckets of the call, in order of first use.
-- ARGV[1]: now_us, tests only ('' in production: TIME). ARGV[2]: r, the number of distinct
-- rules; then 5 arguments per rule: algorithm (gcra | sliding_window | fixed_window), limit,
-- unit_us, burst, penalty_us (0: none). Then the groups, to the end of ARGV: a group's kind ('j' joint, 'e'
-- independent) and its m members, then 4 arguments per member: key index (1-based into
-- KEYS), rule index (1-based), mode (0 consume, 1 peek, 2 refund), n.
-- Reply: one flat array, three entries per member, in order: allowed (0|1), remaining,
-- reset_us; or, for every member of a group that failed (a bad argument, a key of the
-- wrong type), an error reply and two zeros: a group's failure is its own, never another's.
-- Flat, not a table per member: each nested table costs the call an allocation and Redis
-- a nested reply. A write Redis refuses (out of memory,
-- when every write fails) is the error of every group that wrote.
-- No pcall per group: what Redis can fail (a read of the wrong type) is read with
-- redis.pcall before the group is decided, and deciding raises no error on anything a key
-- can hold (unreadable state is no state, every number clamped; tests/differential/junk.rs).
-- A Lua error past the reads would be a bug here, and fail the whole call.

local ALGORITHMS = {gcra = gcra, sliding_window = sliding, fixed_window = fixed, calendar_window = calendar}
local KINDS = {gcra = 'g', sliding_window = 'w', fixed_window = 'w', calendar_window = 'w'}
local CODES = {gcra = 'g', sliding_window = 's', fixed_window = 'f', calendar_window = 'c'}
local MODES = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3}
-- The scratch value of a key read and found empty (nil means not read yet).
local NONE = false

local now = clock(ARGV[1])

-- The rules, once each: run, kind, code, limit, unit, burst, penalty by rule index.
local r = int(ARGV[2])
local runs, kinds_of, codes, limits, units, bursts, penalties = {}, {}, {}, {}, {}, {}, {}
for i = 1, r do
  local a = 3 + 5 * (i - 1)
  runs[i], kinds_of[i], codes[i] = ALGORITHMS[ARGV[a]], KINDS[ARGV[a]], CODES[ARGV[a]]
  limits[i], units[i], bursts[i] = int(ARGV[a + 1]), math.max(int(ARGV[a + 2]), 1), int(ARGV[a + 3])
  penalties[i] = int(ARGV[a + 4])
end

-- What each key held when read (nil: no state), how it was read ('g' or 'w'), its state
-- after the groups decided so far (NONE: no state), and its final write.
local stored, read_as, scratch, writes = {}, {}, {}, {}
-- Per slot (one per member, in order): its key index, rule index, mode, n; its answer is
-- out[3 * slot - 2 .. 3 * slot].
local keys_at, rules_at, modes_at, ns_at = {}, {}, {}, {}
local out = {}

-- Reads key index k as rule's kind on first use (redis.pcall: a key of the wrong type is
-- an error returned, not raised), a window with its window keys' counts (fold, prelude.lua).
-- The error, if any.
local function read(k, rule)
  local kind = kinds_of[rule]
  if scratch[k] ~= nil then return nil end
  local v
  if kind == 'w' then v = redis.pcall('HMGET', KEYS[k], 's', 'c', 'p', 'u') else v = redis.pcall('GET', KEYS[k]) end
  if type(v) == 'table' and v.err then return v end
  local st = decode(kind, v)
  if kind == 'w' then st = fold(KEYS[k], st, now, units[rule], codes[rule]) end
  stored[k], read_as[k] = st, kind
  if st == nil then st = NONE end
  scratch[k] = st
  return nil
end

-- Checks and records the m members of a group at ARGV[a], slots from first, and reads
-- their keys: nil, or the error that fails the group (then nothing was changed).
local function prepare(a, m, first)
  for i = 0, m - 1 do
    local b = a + 4 * i
    local k, rule, mode = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), MODES[ARGV[b + 2]]
    if not k or k < 1 or k > #KEYS or k % 1 ~= 0 then return 'key index out of range' end
    if not rule or not runs[rule] or rule % 1 ~= 0 then return 'unknown rule or algorithm' end
    if not mode then return 'mode must be 0 (consume), 1 (peek), 2 (refund) or 3 (overdraw)' end
    local e = read(k, rule)
    if e then return e end
    local slot = first + i
    keys_at[slot], rules_at[slot], modes_at[slot], ns_at[slot] = k, rule, mode, int(ARGV[b + 3])
  end
  return nil
end

-- Decides slot over state st (decoded, or NONE), with its rule's penalty
-- (algorithm/penalty.lua): allowed, remaining, reset_us, write.
local function decide(slot, st, mode, n)
  if st == NONE then st = nil end
  local rule = rules_at[slot]
  return charge(runs[rule], codes[rule], st, now, limits[rule], units[rule], bursts[rule], mode, n, penalties[rule])
end

-- An independent group (slots first .. last): each member decided in turn over the scratch
-- states, its write (if any) applied before the next one. Whether it wrote.
local function independent(first, last)
  local wrote = false
  for slot = first, last do
    local k = keys_at[slot]
    local allowed, remaining, reset, write = decide(slot, scratch[k], modes_at[slot], ns_at[slot])
    if write ~= nil then
      writes[k] = write
      scratch[k] = write or NONE
      wrote = true
    end
    local o = 3 * slot
    out[o - 2], out[o - 1], out[o] = allowed, remaining, reset
  end
  return wrote
end

-- A joint group: decided over a view of the scratch states; written only if every member
-- passed, else the others describe their bucket as it was before the group and only the
-- penalties its denials started are written (each bucket as it was, marked; the latest end
-- when several members of one bucket breached). Whether it wrote.
local function joint(first, last)
  local view, gwrites, passed, breached = {}, {}, true, {}
  for slot = first, last do
    local k = keys_at[slot]
    local st = view[k]
    if st == nil then st = scratch[k] end
    local allowed, remaining, reset, write = decide(slot, st, modes_at[slot], ns_at[slot])
    breached[slot] = allowed == 0 and write ~= nil
    if write ~= nil then
      gwrites[k] = write
      view[k] = write or NONE
    end
    if allowed == 0 and modes_at[slot] ~= 3 then passed = false end
    local o = 3 * slot
    out[o - 2], out[o - 1], out[o] = allowed, remaining, reset
  end
  if not passed then
    local marks = {}
    for slot = first, last do
      local o = 3 * slot
      local k = keys_at[slot]
      if out[o - 2] == 1 then
        local _, remaining, reset = decide(slot, scratch[k], 1, 0)
        out[o - 1], out[o] = remaining, reset
      elseif breached[slot] then
        local rule, st = rules_at[slot], scratch[k]
        if st == NONE then st = nil end
        local mark = penalty_mark(st, now, codes[rule], units[rule], add(now, penalties[rule]))
        if not marks[k] or marks[k].u < mark.u then marks[k] = mark end
      end
    end
    for k, mark in pairs(marks) do
      writes[k] = mark
      scratch[k] = mark
    end
    return next(marks) ~= nil
  end
  for k, write in pairs(gwrites) do
    writes[k] = write
    scratch[k] = write or NONE
  end
  return next(gwrites) ~= nil
end

-- An error entry: Redis's own (a table {err = ...}), or ours.
local function failed(e)
  if type(e) == 'table' then return e end
  return {err = 'ERR tollgate: batch: ' .. e}
end

-- The groups; those that wrote are kept as (first slot, last slot) pairs, for a refused
-- write.
local wrote = {}
local slots = 0
local a = 3 + 5 * r
while a <= #ARGV do
  local kind, m = ARGV[a], int(ARGV[a + 1])
  local first = slots + 1
  local last = slots + m
  slots = last
  local e = prepare(a + 2, m, first)
  if e then
    e = failed(e)
    for slot = first, last do out[3 * slot - 2], out[3 * slot - 1], out[3 * slot] = e, 0, 0 end
  elseif (kind == 'j' and joint or independent)(first, last) then
    wrote[#wrote + 1] = first
    wrote[#wrote + 1] = last
  end
  a = a + 2 + 4 * m
end

-- Each key's final state, once; a window over a key read as GCRA replaces the string.
local function write_all()
  for k, write in pairs(writes) do put(KEYS[k], write, read_as[k] == 'g', stored[k]) end
end
if next(writes) ~= nil then
  local ok, e = pcall(write_all)
  if not ok then
    e = failed(e)
    for j = 1, #wrote, 2 do
      for slot = wrote[j], wrote[j + 1] do out[3 * slot - 2], out[3 * slot - 1], out[3 * slot] = e, 0, 0 end
    end
  end
end
return out
