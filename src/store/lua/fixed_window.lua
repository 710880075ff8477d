-- Tollgate fixed window (epoch-aligned, as envoyproxy/ratelimit, but a denial consumes
-- nothing): the same function as src/algorithm/fixed_window.rs, kept equal by
-- tests/differential.rs. Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a hash {s = window start µs, c = count, p = 0}, expiring at the
-- window's end. Reply: {allowed 0|1, remaining, reset_us}.

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

-- The count carries over only within the same window. A start in the future (a clock
-- that stepped back) is read as now = start.
local stored = redis.call('HMGET', key, 's', 'c')
if stored[1] then now = math.max(now, int(stored[1])) end
local elapsed = now - div(now, unit) * unit
local ws = now - elapsed
local left = unit - elapsed
local count = 0
if stored[1] and int(stored[1]) == ws then count = int(stored[2]) end

-- An allowed reply for a window holding c.
local function describe(c)
  local reset = 0
  if c > 0 then reset = left end
  return {1, math.max(limit - c, 0), reset}
end

-- Allowed, leaving c in the window: store it, or drop an empty window.
local function charge(c)
  if c == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 's', str(ws), 'c', str(c), 'p', '0')
    redis.call('PEXPIREAT', key, str(ms_ceil(add(ws, unit))))
  end
  return describe(c)
end

if mode == 0 then
  if count + n <= limit then return charge(count + n) end
  return {0, 0, left}
elseif mode == 1 then
  if count < limit then return describe(count) end
  return {0, 0, left}
else
  return charge(math.max(count - n, 0))
end
