-- Tollgate GCRA: the same function as src/algorithm/gcra.rs, kept equal by
-- tests/differential.rs. Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a string, the theoretical arrival time (TAT) in µs, expiring at it.
-- Reply: {allowed 0|1, remaining, reset_us}.

-- Lua numbers are doubles. Every input is clamped to, and every sum or product saturates
-- at, MAX = 2^53 - 1, exactly as the Rust side does (algorithm::MAX_VALUE): every number
-- below is then an exact integer and the answers match Rust bit for bit.
local MAX = 9007199254740991

-- A non-negative integer <= MAX from an argument or a stored string (garbage -> 0).
local function int(v)
  local x = tonumber(v)
  if x == nil or x ~= x or x < 0 then return 0 end
  x = math.floor(x)
  if x > MAX then return MAX end
  return x
end

local function add(a, b)
  local s = a + b
  if s > MAX then return MAX end
  return s
end

local function mul(a, b)
  local s = a * b
  if s > MAX then return MAX end
  return s
end

-- floor(a / b) for 0 <= a <= MAX, 1 <= b <= MAX: the double quotient may be one off.
local function div(a, b)
  local q = math.floor(a / b)
  if q * b > a then return q - 1 end
  if (q + 1) * b <= a then return q + 1 end
  return q
end

-- Microseconds since the epoch: ARGV[6] when given (tests only), else the server's TIME.
local function clock()
  local fake = ARGV[6]
  if fake ~= nil and fake ~= '' then return int(fake) end
  local t = redis.call('TIME')
  return int(t[1]) * 1000000 + int(t[2])
end

-- An integer as a plain decimal string (tostring would give 1e+15).
local function str(x)
  return string.format('%.0f', x)
end

-- A µs instant as the ms instant PXAT/PEXPIREAT want, rounded up, at least 1.
local function ms_ceil(us)
  local ms = div(us, 1000)
  if ms * 1000 < us then ms = ms + 1 end
  if ms < 1 then return 1 end
  return ms
end

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
