-- Tollgate: what every script is built from, written once (prepended to each at build
-- time by src/store/scripts.rs, so each script is still one self-contained EVAL body):
-- integers, the clock, stored state, and the three algorithms as pure functions of a
-- decoded state. The scripts after it (gcra.lua, sliding_window.lua, fixed_window.lua,
-- joint.lua, approx.lua) only read their KEYS and ARGV, call these, and answer.
-- Contract (KEYS, ARGV, reply, storage): README.md in this folder.

-- Integers ----------------------------------------------------------------------------

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

-- The clock ---------------------------------------------------------------------------

-- Microseconds since the epoch: fake when given (the test clock argument: tests only),
-- else the server's TIME.
local function clock(fake)
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

-- Stored state ------------------------------------------------------------------------

-- A decoded state is nil (no state), {kind = 'g', t, r} (GCRA: the TAT t + r / limit µs,
-- stored as the string "<t>:<r>", or "<t>" when r is 0) or {kind = 'w', s, c, p} (both
-- windows: the hash {s = window start µs, c = count, p = previous window's count}).

-- The state under key as an algorithm of kind ('g' or 'w') stores it. Anything unreadable
-- is no state.
local function read_state(key, kind)
  if kind == 'w' then
    local v = redis.call('HMGET', key, 's', 'c', 'p')
    if v[1] then return {kind = 'w', s = int(v[1]), c = int(v[2]), p = int(v[3])} end
    return nil
  end
  local v = redis.call('GET', key)
  if not v then return nil end
  local t, r = string.match(v, '^(%d+):(%d+)$')
  if not t then t, r = string.match(v, '^(%d+)$'), 0 end
  if t then return {kind = 'g', t = int(t), r = int(r)} end
  return nil
end

-- Writes what an algorithm decided for key (its second result): nil nothing, false delete
-- the key, else {state = <decoded>, at = <expiry, ms>}. replaces: the key was read as GCRA
-- and a window is written over it (never in practice): the string goes first.
local function put(key, write, replaces)
  if write == nil then return end
  if not write then
    redis.call('DEL', key)
    return
  end
  local s = write.state
  if s.kind == 'g' then
    local value = str(s.t)
    if s.r > 0 then value = value .. ':' .. str(s.r) end
    redis.call('SET', key, value, 'PXAT', str(write.at))
  else
    if replaces then redis.call('DEL', key) end
    redis.call('HSET', key, 's', str(s.s), 'c', str(s.c), 'p', str(s.p))
    redis.call('PEXPIREAT', key, str(write.at))
  end
end

-- The algorithms ----------------------------------------------------------------------

-- Each is the same function as its Rust twin in src/algorithm/, kept equal by
-- tests/differential.rs: (st, now, limit, unit, burst, mode, n) -> reply, write. reply is
-- {allowed 0|1, remaining, reset_us}; write is as put takes it (a denial writes nothing).
-- mode is 0 (consume n), 1 (peek) or 2 (refund n), checked by the caller; unit >= 1.

-- GCRA (src/algorithm/gcra.rs). Durations are pairs (us, frac): us + frac / limit µs,
-- 0 <= frac < limit, so that an emission interval unit / limit is never rounded. Rust:
-- gcra::Span.
local function gcra(st, now, limit, unit, burst, mode, n)
  if limit == 0 then
    -- Blocks everything without dividing; a refund has nothing to give back.
    if mode == 2 then return {1, 0, 0} end
    return {0, 0, unit}
  end
  -- k emissions: k * unit / limit µs, exactly.
  local function span(k) return muldiv(k, unit, limit) end
  -- a + b, the µs saturating; the carry test never forms a sum that could pass 2^53.
  local function plus(au, af, bu, bf)
    if af >= limit - bf then return add(add(au, bu), 1), af - (limit - bf) end
    return add(au, bu), af + bf
  end
  -- a - b, for a >= b.
  local function minus(au, af, bu, bf)
    if af >= bf then return au - bu, af - bf end
    return au - bu - 1, af + (limit - bf)
  end
  local function le(au, af, bu, bf) return au < bu or (au == bu and af <= bf) end
  -- Rounded up to whole µs.
  local function ceil_us(u, f)
    if f > 0 then return add(u, 1) end
    return u
  end
  -- ceil(d * limit / unit): the emissions d covers, counting a started one.
  local function hits_in(u, f)
    local q, r = muldiv(u, limit, unit)
    local fq = div(f, unit)
    local fr = f - fq * unit
    local carry = 0
    if r > unit - fr then carry = 2 elseif r > 0 or fr > 0 then carry = 1 end
    return add(add(q, fq), carry)
  end
  local tol_u, tol_f = span(burst)
  -- ahead = max(tat, now) - now. A remainder stored under another limit (before a reload)
  -- is clamped below this one (< 1 µs).
  local ahead_u, ahead_f = 0, 0
  if st and st.kind == 'g' and st.t >= now then
    ahead_u, ahead_f = st.t - now, math.min(st.r, limit - 1)
  end
  -- An allowed reply for a bucket (u, f) ahead of now.
  local function allowed_at(u, f)
    return {1, math.max(burst - hits_in(u, f), 0), ceil_us(u, f)}
  end
  -- Allowed, leaving the TAT (u, f) ahead of now: store it, or drop it when it is now.
  local function store(u, f)
    if u == 0 and f == 0 then return allowed_at(u, f), false end
    local tat = add(now, u)
    -- An instant that saturates is MAX exactly (time stands still there).
    local rem = f
    if tat == MAX then rem = 0 end
    return allowed_at(u, f), {state = {kind = 'g', t = tat, r = rem}, at = ms_ceil(ceil_us(tat, rem))}
  end
  if mode == 0 then
    local eu, ef = span(n)
    local nu, nf = plus(ahead_u, ahead_f, eu, ef)
    if le(nu, nf, tol_u, tol_f) then return store(nu, nf) end
    return {0, 0, ceil_us(minus(nu, nf, tol_u, tol_f))}
  elseif mode == 1 then
    local eu, ef = span(1)
    local nu, nf = plus(ahead_u, ahead_f, eu, ef)
    if le(nu, nf, tol_u, tol_f) then return allowed_at(ahead_u, ahead_f) end
    -- One hit passes sooner than the bucket is full: report full.
    if le(eu, ef, tol_u, tol_f) then return {0, 0, ceil_us(ahead_u, ahead_f)} end
    -- burst == 0 admits nothing (not even on an empty bucket): report ahead + emission.
    return {0, 0, ceil_us(minus(nu, nf, tol_u, tol_f))}
  end
  local bu, bf = span(n)
  if le(ahead_u, ahead_f, bu, bf) then return store(0, 0) end
  return store(minus(ahead_u, ahead_f, bu, bf))
end

-- The window a stored window state is in at now, rolled forward: (ws = its start, left =
-- µs to its end, current, previous). The count carries over only within the same window
-- and, for a sliding window, into the next one as its previous count. A start in the
-- future (a clock that stepped back) is read as now = start. Also approx.lua's.
local function window_at(st, now, unit, sliding)
  if st and st.kind ~= 'w' then st = nil end
  if st then now = math.max(now, st.s) end
  local elapsed = now - div(now, unit) * unit
  local ws = now - elapsed
  local current, previous = 0, 0
  if st then
    if st.s == ws then
      current = st.c
      if sliding then previous = st.p end
    elseif sliding and ws >= unit and st.s == ws - unit then
      previous = st.c
    end
  end
  return ws, unit - elapsed, current, previous
end

-- When a window starting at ws expires, in ms: two windows on (sliding: it is the next
-- one's previous count), else at its end.
local function window_expiry(ws, unit, sliding)
  if sliding then return ms_ceil(add(add(ws, unit), unit)) end
  return ms_ceil(add(ws, unit))
end

-- Sliding window, two-epoch weighted counter (src/algorithm/sliding_window.rs).
local function sliding(st, now, limit, unit, burst, mode, n)
  local ws, left, current, previous = window_at(st, now, unit, true)
  -- ceil(previous * left / unit): comparing it plus integers with limit is the exact
  -- inequality previous * left + (current + n) * unit <= limit * unit.
  local weighted, rest = muldiv(previous, left, unit)
  if rest > 0 then weighted = add(weighted, 1) end
  -- Sums of up to three values <= MAX compared with a value <= MAX: exact even when the
  -- sum itself is not representable (it then rounds to at least 2^53).
  local function fits(k) return weighted + current + k <= limit end
  local function remaining(c) return math.max(limit - (weighted + c), 0) end
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
    local reply = {1, remaining(c), until_full(c)}
    if c == 0 and previous == 0 then return reply, false end
    local state = {kind = 'w', s = ws, c = c, p = previous}
    return reply, {state = state, at = window_expiry(ws, unit, true)}
  end
  if mode == 0 then
    if fits(n) then return charge(current + n) end
    return {0, 0, until_fits(n)}
  elseif mode == 1 then
    if fits(1) then return {1, remaining(current), until_full(current)} end
    return {0, 0, math.max(until_full(current), until_fits(1))}
  end
  return charge(math.max(current - n, 0))
end

-- Fixed window, epoch-aligned as envoyproxy/ratelimit, but a denial consumes nothing
-- (src/algorithm/fixed_window.rs). The hash's p is always 0.
local function fixed(st, now, limit, unit, burst, mode, n)
  local ws, left, count = window_at(st, now, unit, false)
  -- An allowed reply for a window holding c.
  local function describe(c)
    local reset = 0
    if c > 0 then reset = left end
    return {1, math.max(limit - c, 0), reset}
  end
  -- Allowed, leaving c in the window: store it, or drop an empty window.
  local function charge(c)
    if c == 0 then return describe(c), false end
    return describe(c), {state = {kind = 'w', s = ws, c = c, p = 0}, at = window_expiry(ws, unit, false)}
  end
  if mode == 0 then
    if count + n <= limit then return charge(count + n) end
    return {0, 0, left}
  elseif mode == 1 then
    if count < limit then return describe(count) end
    return {0, 0, left}
  end
  return charge(math.max(count - n, 0))
end

-- Each algorithm by its name in the joint call, with the kind of state it reads.
local ALGORITHMS = {
  gcra = {run = gcra, kind = 'g'},
  sliding_window = {run = sliding, kind = 'w'},
  fixed_window = {run = fixed, kind = 'w'},
}

-- Calls ---------------------------------------------------------------------------------

local BAD_MODE = 'ERR tollgate: mode must be 0 (consume), 1 (peek) or 2 (refund)'

-- A single script's call (README.md, "Call"): EVALSHA <sha> 1 <key> <limit> <unit_us>
-- <burst> <mode> <n> [<now_us>]. Reads KEYS[1] as algorithm stores it, decides, writes
-- the decision, and returns the reply.
local function single(algorithm)
  local key = KEYS[1]
  local limit = int(ARGV[1])
  local unit = math.max(int(ARGV[2]), 1)
  local burst = int(ARGV[3])
  local mode = int(ARGV[4])
  local n = int(ARGV[5])
  local now = clock(ARGV[6])
  if mode > 2 then return redis.error_reply(BAD_MODE) end
  local reply, write = algorithm.run(read_state(key, algorithm.kind), now, limit, unit, burst, mode, n)
  put(key, write, false)
  return reply
end
