-- Tollgate sliding window (two-epoch weighted counter): the same function as
-- src/algorithm/sliding_window.rs, kept equal by tests/differential.rs. Contract (KEYS,
-- ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a hash {s = window start µs, c = current count, p = previous count},
-- expiring two windows after s. Reply: {allowed 0|1, remaining, reset_us}.

-- (prelude.lua, prepended at build time: MAX, int, add, mul, div, muldiv, clock, str,
-- ms_ceil)

local key = KEYS[1]
local limit = int(ARGV[1])
local unit = math.max(int(ARGV[2]), 1)
local burst = int(ARGV[3])
local mode = int(ARGV[4])
local n = int(ARGV[5])
local now = clock(ARGV[6])
if mode > 2 then
  return redis.error_reply('ERR tollgate: mode must be 0 (consume), 1 (peek) or 2 (refund)')
end

-- Roll the stored window forward to now's window. A start in the future (a clock that
-- stepped back) is read as now = start.
local stored = redis.call('HMGET', key, 's', 'c', 'p')
if stored[1] then now = math.max(now, int(stored[1])) end
local elapsed = now - div(now, unit) * unit
local ws = now - elapsed
local left = unit - elapsed
local current, previous = 0, 0
if stored[1] then
  local s = int(stored[1])
  if s == ws then
    current, previous = int(stored[2]), int(stored[3])
  elseif ws >= unit and s == ws - unit then
    previous = int(stored[2])
  end
end

-- ceil(previous * left / unit): comparing it plus integers with limit is the exact
-- inequality previous * left + (current + n) * unit <= limit * unit.
local weighted, rest = muldiv(previous, left, unit)
if rest > 0 then weighted = add(weighted, 1) end

-- Sums of up to three values <= MAX compared with a value <= MAX: exact even when the
-- sum itself is not representable (it then rounds to at least 2^53).
local function fits(k)
  return weighted + current + k <= limit
end

local function remaining(c)
  return math.max(limit - (weighted + c), 0)
end

-- Time until the estimate is 0 with no more charges, current count c.
local function until_full(c)
  if c > 0 then return add(left, unit) end
  if previous > 0 then return left end
  return 0
end

-- Exact time until k hits fit with no more charges; k does not fit now.
local function until_fits(k)
  if k > limit then return add(left, unit) end
  if previous > 0 and current + k <= limit then
    local covered = muldiv(limit - current - k, unit, previous)
    if covered >= 1 then return math.max(left - covered, 0) end
  end
  if current == 0 then return left end
  local covered = muldiv(limit - k, unit, current)
  return add(left, math.max(unit - covered, 0))
end

-- Allowed, leaving c in the current window: store the window, or drop an empty one.
local function charge(c)
  if c == 0 and previous == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 's', str(ws), 'c', str(c), 'p', str(previous))
    redis.call('PEXPIREAT', key, str(ms_ceil(add(add(ws, unit), unit))))
  end
  return {1, remaining(c), until_full(c)}
end

if mode == 0 then
  if fits(n) then return charge(current + n) end
  return {0, 0, until_fits(n)}
elseif mode == 1 then
  if fits(1) then return {1, remaining(current), until_full(current)} end
  return {0, 0, math.max(until_full(current), until_fits(1))}
else
  return charge(math.max(current - n, 0))
end
