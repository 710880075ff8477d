-- Tollgate fixed window (epoch-aligned, as envoyproxy/ratelimit, but a denial consumes
-- nothing): the same function as src/algorithm/fixed_window.rs, kept equal by
-- tests/differential.rs. Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a hash {s = window start µs, c = count, p = 0}, expiring at the
-- window's end. Reply: {allowed 0|1, remaining, reset_us}.

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
