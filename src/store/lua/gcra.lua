-- Tollgate GCRA: the same function as src/algorithm/gcra.rs, kept equal by
-- tests/differential.rs. Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a string, the theoretical arrival time (TAT) in µs, expiring at it.
-- Reply: {allowed 0|1, remaining, reset_us}.

-- (prelude.lua, prepended at build time: MAX, int, add, mul, div, clock, str, ms_ceil)

local key = KEYS[1]
local limit = int(ARGV[1])
local unit = math.max(int(ARGV[2]), 1)
local burst = int(ARGV[3])
local mode = int(ARGV[4])
local n = int(ARGV[5])
local now = clock()
if mode > 2 then
  return redis.error_reply('ERR tollgate: mode must be 0 (consume), 1 (peek) or 2 (refund)')
end
if limit == 0 then
  -- Blocks everything without dividing; a refund has nothing to give back.
  if mode == 2 then return {1, 0, 0} end
  return {0, 0, unit}
end

local emission = math.max(div(unit, limit), 1)
local tolerance = mul(emission, burst)
local tat = math.max(int(redis.call('GET', key)), now)

-- Hits admissible now if the TAT were t (>= now).
local function remaining_at(t)
  return div(math.max(tolerance - (t - now), 0), emission)
end

-- Allowed, leaving the TAT at t (>= now): store it, or drop it once it is in the past.
local function store(t)
  if t <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, str(t), 'PXAT', str(ms_ceil(t)))
  end
  return {1, remaining_at(t), t - now}
end

if mode == 0 then
  local new = add(tat, mul(emission, n))
  local ahead = new - now
  if ahead <= tolerance then return store(new) end
  return {0, 0, ahead - tolerance}
elseif mode == 1 then
  local ahead = tat - now
  if ahead + emission <= tolerance then return {1, remaining_at(tat), ahead} end
  if emission <= tolerance then return {0, 0, ahead} end
  return {0, 0, add(ahead, emission - tolerance)}
else
  return store(math.max(tat - mul(emission, n), now))
end
