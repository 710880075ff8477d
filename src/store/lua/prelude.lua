-- Tollgate: what every script starts with, written once (src/store/redis/scripts.rs builds each
-- script as this file, the algorithm/ files it needs, then its entry, so each script is
-- still one self-contained EVAL body): integers, the clock, stored state and the single
-- call. The algorithms are pure functions of a decoded state, one file each in algorithm/;
-- a script carries only the ones it runs (every function defined costs each call a
-- closure). The entries (gcra.lua, sliding_window.lua, fixed_window.lua, joint.lua,
-- approx.lua) only read their KEYS and ARGV, call these, and answer.
-- Contract (KEYS, ARGV, reply, storage): README.md in this folder.

-- Integers ----------------------------------------------------------------------------

-- Lua numbers are doubles. Every input is clamped to, and every sum or product saturates
-- at, MAX = 2^53 - 1, exactly as the Rust side does (algorithm::MAX_VALUE): every number
-- below is then an exact integer and the answers match Rust bit for bit.
local MAX = 9007199254740991
-- Below this an integer prints exactly with tostring ('%.14g'), without string.format.
local PLAIN = 100000000000000
local floor, tonumber, tostring, format = math.floor, tonumber, tostring, string.format

-- A non-negative integer <= MAX from an argument or a stored string (garbage -> 0).
local function int(v)
  local x = tonumber(v)
  if x == nil or x ~= x or x < 0 then return 0 end
  x = floor(x)
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

-- floor(a / b) for 0 <= a <= MAX, 1 <= b <= MAX. For a < 2^53 the rounded double quotient
-- never reaches the next integer (its distance to it, >= 1/b, is more than half an ulp),
-- so floor is exact; the correction covers anything larger.
local function div(a, b)
  local q = floor(a / b)
  if a <= MAX then return q end
  if q * b > a then return q - 1 end
  if (q + 1) * b <= a then return q + 1 end
  return q
end

-- floor(a * b / c) and (a * b) % c, exactly, for 0 <= a, b <= MAX and 1 <= c <= MAX; the
-- quotient saturates at MAX (the remainder stays exact), as algorithm::mul_div_rem.
-- When a * b fits below 2^53 it is formed directly (a true product above MAX rounds to at
-- least 2^53, so the test is exact); otherwise (it can reach 2^106) this is long
-- multiplication over the bits of a, the running product kept as q * c + r, 0 <= r < c.
local function muldiv(a, b, c)
  local p = a * b
  if p <= MAX then
    local q = floor(p / c)
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

-- An integer as a plain decimal string (tostring would give 1e+15 from 10^14 on).
local function str(x)
  if x < PLAIN then return tostring(x) end
  return format('%.0f', x)
end

-- A µs instant as the ms instant PXAT/PEXPIREAT want, rounded up, at least 1.
local function ms_ceil(us)
  local ms = floor(us / 1000)
  if ms * 1000 < us then ms = ms + 1 end
  if ms < 1 then return 1 end
  return ms
end

-- Stored state ------------------------------------------------------------------------

-- A decoded state is nil (no state), {kind = 'g', t, r} (GCRA: the TAT t + r / limit µs,
-- stored as the string "<t>:<r>", or "<t>" when r is 0) or {kind = 'w', s, c, p} (both
-- windows: the hash {s = window start µs, c = count, p = previous window's count}). A
-- penalized bucket's state also has u, the end of its penalty (algorithm/penalty.lua):
-- "<t>:<r>:<u>", or the hash's field u.

-- A state decoded from what a read of kind ('g': GET, 'w': HMGET s c p u) returned.
-- Anything unreadable is no state.
local function decode(kind, v)
  if kind == 'w' then
    if not v[1] then return nil end
    local st = {kind = 'w', s = int(v[1]), c = int(v[2]), p = int(v[3])}
    if v[4] then st.u = int(v[4]) end
    return st
  end
  if not v then return nil end
  -- "<t>", "<t>:<r>" or "<t>:<r>:<u>", digits only: one match.
  local t, c1, r, c2, u = string.match(v, '^(%d+)(:?)(%d*)(:?)(%d*)$')
  if not t or (c1 == '') ~= (r == '') or (c2 == '') ~= (u == '') then return nil end
  local st = {kind = 'g', t = int(t), r = int(r)}
  if u ~= '' then st.u = int(u) end
  return st
end

-- Window keys ---------------------------------------------------------------------------

-- A fixed or sliding window's counts may also sit in one key per window beside the hash,
-- written by plain window commands (src/store/redis/plain.rs; README.md, "Plain window
-- commands"): a window's count is the hash's (when the hash is in that window) plus its
-- window key's. The key of the window starting at ws: in the bucket key's hash tag (one
-- slot in a cluster), as plain::window_key.
local function window_key(key, ws)
  local open = string.find(key, '{', 1, true)
  if open then
    local close = string.find(key, '}', open + 1, true)
    if close and close > open + 1 then return key .. ':' .. str(ws) end
  end
  if string.find(key, '}', 1, true) then return key .. ':' .. str(ws) end
  return '{' .. key .. '}:' .. str(ws)
end

-- A window key's count (a key of another type, or garbage, is 0).
local function window_count(wkey)
  local v = redis.pcall('GET', wkey)
  if type(v) ~= 'string' then return 0 end
  return int(v)
end

-- The state st (decoded from key's hash, nil if none) of a fixed ('f') or sliding ('s')
-- window at now, with its window keys' counts added (only in the scripts built to read them,
-- WINDOW_KEYS: window_keys_on.lua; the others pay nothing for window keys): the state in the window now is in
-- (start ws as window_at computes it), the hash's share kept as st.w = {ws, wc, wp, raw}
-- for put. Unchanged when no window key counts (st.w nil): a bucket no plain command
-- touched reads and writes exactly as before window keys.
local function fold(key, st, now, unit, code)
  if not WINDOW_KEYS or (code ~= 'f' and code ~= 's') or (st and st.kind ~= 'w') then return st end
  if st then now = math.max(now, st.s) end
  local ws = now - (now - div(now, unit) * unit)
  local wc = window_count(window_key(key, ws))
  local wp = 0
  if code == 's' and ws >= unit then wp = window_count(window_key(key, ws - unit)) end
  if wc == 0 and wp == 0 then return st end
  local c, p = 0, 0
  if st and st.s == ws then
    c = st.c
    if code == 's' then p = st.p end
  elseif st and code == 's' and st.s == ws - unit then
    p = st.c
  end
  local f = {ws = ws, wc = wc, wp = wp, raw = st}
  if ws >= unit then f.before = ws - unit end
  local folded = {kind = 'w', s = ws, c = add(c, wc), p = add(p, wp), w = f}
  if st then folded.u = st.u end
  return folded
end

-- The state under key as an algorithm of kind ('g' or 'w') stores it; a fixed or sliding
-- window's (code 'f' or 's', unit µs) with its window keys' counts at now (fold).
local function read_state(key, kind, now, unit, code)
  if kind == 'w' then
    local st = decode(kind, redis.call('HMGET', key, 's', 'c', 'p', 'u'))
    if code then st = fold(key, st, now, unit, code) end
    return st
  end
  return decode(kind, redis.call('GET', key))
end

-- The hash's share of write (a state, or false) for a state was folded from window keys:
-- the counts less the window keys' (a count below its window key's — a refund — lowers
-- the window key to it and leaves the hash none of it), and the hash as read. A write in
-- another window than the fold's (never in practice) is written whole.
local function unfold(key, write, was)
  local f = was.w
  if write == false then
    if f.wc > 0 then redis.call('DEL', window_key(key, f.ws)) end
    return false, f.raw
  end
  if write.kind ~= 'w' or write.s ~= f.ws then return write, f.raw end
  local c, p = write.c - f.wc, write.p - f.wp
  if c < 0 then
    redis.call('SET', window_key(key, f.ws), str(write.c), 'KEEPTTL')
    c = 0
  end
  if p < 0 and f.before then
    redis.call('SET', window_key(key, f.before), str(write.p), 'KEEPTTL')
  end
  if p < 0 then p = 0 end
  local share = {kind = 'w', s = write.s, c = c, p = p, u = write.u, at = write.at}
  if c == 0 and p == 0 and not write.u then return false, f.raw end
  return share, f.raw
end

-- Writes what an algorithm decided for key (its last result): nil nothing, false delete
-- the key, else the decoded state to store with its expiry (ms) as `at`. replaces: the key was read as GCRA
-- and a window is written over it (never in practice): the string goes first. was: the
-- state read from the key (nil if none): a window still in the window it was stored in,
-- with no penalty on either side, keeps its start, its previous count and its expiry (both
-- follow from the start), so only its count is written. A penalty that ended is dropped
-- by the next write.
local function put(key, write, replaces, was)
  if write == nil then return end
  if was and was.w then write, was = unfold(key, write, was) end
  if not write then
    redis.call('DEL', key)
    return
  end
  local s = write
  if s.kind == 'g' then
    local value = str(s.t)
    if s.u then
      value = value .. ':' .. str(s.r) .. ':' .. str(s.u)
    elseif s.r > 0 then
      value = value .. ':' .. str(s.r)
    end
    redis.call('SET', key, value, 'PXAT', str(s.at))
  elseif not replaces and was and was.kind == 'w' and was.s == s.s and was.p == s.p and not was.u and not s.u then
    redis.call('HSET', key, 'c', str(s.c))
  else
    if replaces then redis.call('DEL', key) end
    if s.u then
      redis.call('HSET', key, 's', str(s.s), 'c', str(s.c), 'p', str(s.p), 'u', str(s.u))
    else
      redis.call('HSET', key, 's', str(s.s), 'c', str(s.c), 'p', str(s.p))
      if was and was.u then redis.call('HDEL', key, 'u') end
    end
    redis.call('PEXPIREAT', key, str(s.at))
  end
end

-- Calls ---------------------------------------------------------------------------------

local BAD_MODE = 'ERR tollgate: mode must be 0 (consume), 1 (peek), 2 (refund) or 3 (overdraw)'
