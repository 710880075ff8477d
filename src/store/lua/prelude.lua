-- Tollgate: helpers shared by every script (prepended to each at build time by
-- src/store/scripts.rs, so each script is still one self-contained EVAL body).

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

-- floor(a * b / c) and (a * b) % c, exactly, for 0 <= a, b <= MAX and 1 <= c <= MAX; the
-- quotient saturates at MAX (the remainder stays exact), as algorithm::mul_div_rem.
-- When a * b fits below 2^53 it is formed directly; otherwise (it can reach 2^106) this is
-- long multiplication over the bits of a, the running product kept as q * c + r, 0 <= r < c.
local function muldiv(a, b, c)
  if a == 0 or b <= div(MAX, a) then
    local p = a * b
    local q = div(p, c)
    return q, p - q * c
  end
  local bq = div(b, c)
  local br = b - bq * c
  local bits = {}
  while a > 0 do
    local bit = a % 2
    bits[#bits + 1] = bit
    a = (a - bit) / 2
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q = mul(q, 2)
    if r >= c - r then r = r - (c - r); q = add(q, 1) else r = r + r end
    if bits[i] == 1 then
      q = add(q, bq)
      if r >= c - br then r = r - (c - br); q = add(q, 1) else r = r + br end
    end
  end
  return q, r
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
