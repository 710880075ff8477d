-- Tollgate joint charge: a group of members decided at one instant that stand or fall
-- together. The same function as src/algorithm/joint.rs, kept equal by
-- tests/differential.rs; the per-algorithm math is that of gcra.lua, sliding_window.lua
-- and fixed_window.lua, as pure functions of a decoded state. Contract (KEYS, ARGV, reply,
-- storage): README.md in this folder.
-- KEYS: the group's distinct buckets (one slot in a cluster).
-- ARGV[1] = m, the number of members; then 7 per member: key index (1-based into KEYS),
-- algorithm (gcra | sliding_window | fixed_window), limit, unit_us, burst, mode, n; then,
-- tests only, now_us (ARGV[2 + 7m]; '' in production when the next argument follows);
-- then, optional, ARGV[3 + 7m] = '1': the members are independent (a coalesced batch on
-- one key): each is applied if it fits, and a denial vetoes no other member.
-- Reply: one {allowed 0|1, remaining, reset_us} per member, in order.

-- (prelude.lua, prepended at build time: MAX, int, add, mul, div, muldiv, clock, str,
-- ms_ceil)

-- A decoded state is nil (no state), {kind = 'g', t, r} (GCRA: TAT t + r / limit) or
-- {kind = 'w', s, c, p} (both windows). Each algorithm returns its reply and its write:
-- nil (nothing), false (delete the key) or {state = <decoded>, at = <expiry, ms>}.

local function gcra(st, now, limit, unit, burst, mode, n)
  if limit == 0 then
    if mode == 2 then return {1, 0, 0} end
    return {0, 0, unit}
  end
  local function span(k) return muldiv(k, unit, limit) end
  local function plus(au, af, bu, bf)
    if af >= limit - bf then return add(add(au, bu), 1), af - (limit - bf) end
    return add(au, bu), af + bf
  end
  local function minus(au, af, bu, bf)
    if af >= bf then return au - bu, af - bf end
    return au - bu - 1, af + (limit - bf)
  end
  local function le(au, af, bu, bf) return au < bu or (au == bu and af <= bf) end
  local function ceil_us(u, f)
    if f > 0 then return add(u, 1) end
    return u
  end
  local function hits_in(u, f)
    local q, r = muldiv(u, limit, unit)
    local fq = div(f, unit)
    local fr = f - fq * unit
    local carry = 0
    if r > unit - fr then carry = 2 elseif r > 0 or fr > 0 then carry = 1 end
    return add(add(q, fq), carry)
  end
  local tol_u, tol_f = span(burst)
  local ahead_u, ahead_f = 0, 0
  if st and st.kind == 'g' and st.t >= now then
    ahead_u, ahead_f = st.t - now, math.min(st.r, limit - 1)
  end
  local function allowed_at(u, f)
    return {1, math.max(burst - hits_in(u, f), 0), ceil_us(u, f)}
  end
  local function store(u, f)
    if u == 0 and f == 0 then return allowed_at(u, f), false end
    local tat = add(now, u)
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
    if le(eu, ef, tol_u, tol_f) then return {0, 0, ceil_us(ahead_u, ahead_f)} end
    return {0, 0, ceil_us(minus(nu, nf, tol_u, tol_f))}
  end
  local bu, bf = span(n)
  if le(ahead_u, ahead_f, bu, bf) then return store(0, 0) end
  return store(minus(ahead_u, ahead_f, bu, bf))
end

-- The window a stored window state is in at now: (now, ws, left, the stored state if it
-- is a window). A start in the future (a clock that stepped back) is read as now = start.
local function window_at(st, now, unit)
  if st and st.kind ~= 'w' then st = nil end
  if st then now = math.max(now, st.s) end
  local elapsed = now - div(now, unit) * unit
  return now, now - elapsed, unit - elapsed, st
end

local function sliding(st, now, limit, unit, burst, mode, n)
  local ws, left
  now, ws, left, st = window_at(st, now, unit)
  local current, previous = 0, 0
  if st then
    if st.s == ws then
      current, previous = st.c, st.p
    elseif ws >= unit and st.s == ws - unit then
      previous = st.c
    end
  end
  local weighted, rest = muldiv(previous, left, unit)
  if rest > 0 then weighted = add(weighted, 1) end
  local function fits(k) return weighted + current + k <= limit end
  local function remaining(c) return math.max(limit - (weighted + c), 0) end
  local function until_full(c)
    if c > 0 then return add(left, unit) end
    if previous > 0 then return left end
    return 0
  end
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
  local function charge(c)
    local reply = {1, remaining(c), until_full(c)}
    if c == 0 and previous == 0 then return reply, false end
    local state = {kind = 'w', s = ws, c = c, p = previous}
    return reply, {state = state, at = ms_ceil(add(add(ws, unit), unit))}
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

local function fixed(st, now, limit, unit, burst, mode, n)
  local ws, left
  now, ws, left, st = window_at(st, now, unit)
  local count = 0
  if st and st.s == ws then count = st.c end
  local function describe(c)
    local reset = 0
    if c > 0 then reset = left end
    return {1, math.max(limit - c, 0), reset}
  end
  local function charge(c)
    if c == 0 then return describe(c), false end
    return describe(c), {state = {kind = 'w', s = ws, c = c, p = 0}, at = ms_ceil(add(ws, unit))}
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

local algorithms = {gcra = gcra, sliding_window = sliding, fixed_window = fixed}

-- Parse and check every member before touching anything.
local m = int(ARGV[1])
if m < 1 or #ARGV < 1 + 7 * m then
  return redis.error_reply('ERR tollgate: joint: ARGV must hold m, then 7 arguments per member')
end
local members = {}
for i = 1, m do
  local a = 1 + 7 * (i - 1)
  local member = {
    key = int(ARGV[a + 1]), run = algorithms[ARGV[a + 2]], limit = int(ARGV[a + 3]),
    unit = math.max(int(ARGV[a + 4]), 1), burst = int(ARGV[a + 5]), mode = int(ARGV[a + 6]),
    n = int(ARGV[a + 7]), window = ARGV[a + 2] ~= 'gcra',
  }
  if member.key < 1 or member.key > #KEYS then
    return redis.error_reply('ERR tollgate: joint: key index out of range')
  end
  if not member.run then
    return redis.error_reply('ERR tollgate: joint: unknown algorithm')
  end
  if member.mode > 2 then
    return redis.error_reply('ERR tollgate: mode must be 0 (consume), 1 (peek) or 2 (refund)')
  end
  members[i] = member
end

-- The clock: the prelude's, with the test-only fake time after the members.
local now
local fake = ARGV[2 + 7 * m]
if fake ~= nil and fake ~= '' then
  now = int(fake)
else
  local t = redis.call('TIME')
  now = int(t[1]) * 1000000 + int(t[2])
end

-- Independent members (a coalesced batch): no all-or-nothing.
local each = ARGV[3 + 7 * m] == '1'

-- Read each key once, as the algorithm of its first member stores it (the key's tag names
-- the algorithm: one key never holds two). Anything unreadable is no state, as in the
-- single scripts.
local stored = {}
local read = {}
for _, member in ipairs(members) do
  local k = member.key
  if not read[k] then
    read[k] = member.window and 'w' or 'g'
    if member.window then
      local v = redis.call('HMGET', KEYS[k], 's', 'c', 'p')
      if v[1] then stored[k] = {kind = 'w', s = int(v[1]), c = int(v[2]), p = int(v[3])} end
    else
      local v = redis.call('GET', KEYS[k])
      if v then
        local t, r = string.match(v, '^(%d+):(%d+)$')
        if not t then t, r = string.match(v, '^(%d+)$'), 0 end
        if t then stored[k] = {kind = 'g', t = int(t), r = int(r)} end
      end
    end
  end
end

-- Decide in order over a scratch copy: a key met twice sees the earlier member. A denied
-- member writes nothing, so with independent members the next one sees the key as if the
-- denied one had not come: the answers of single calls in this order at this instant.
local scratch, writes = {}, {}
for k, st in pairs(stored) do scratch[k] = st end
local replies, passed = {}, true
for i, member in ipairs(members) do
  local k = member.key
  local reply, write = member.run(scratch[k], now, member.limit, member.unit, member.burst, member.mode, member.n)
  if write ~= nil then
    writes[k] = write
    scratch[k] = write and write.state or nil
  end
  if reply[1] == 0 then passed = false end
  replies[i] = reply
end

if not passed and not each then
  -- Nothing is written: the others describe their bucket as stored, allowed.
  for i, member in ipairs(members) do
    if replies[i][1] == 1 then
      local peek = member.run(stored[member.key], now, member.limit, member.unit, member.burst, 1, 0)
      replies[i] = {1, peek[2], peek[3]}
    end
  end
  return replies
end

for k, write in pairs(writes) do
  local key = KEYS[k]
  if not write then
    redis.call('DEL', key)
  elseif write.state.kind == 'g' then
    local value = str(write.state.t)
    if write.state.r > 0 then value = value .. ':' .. str(write.state.r) end
    redis.call('SET', key, value, 'PXAT', str(write.at))
  else
    local s = write.state
    -- A window over a key read as GCRA (never in practice): replace the string.
    if read[k] == 'g' then redis.call('DEL', key) end
    redis.call('HSET', key, 's', str(s.s), 'c', str(s.c), 'p', str(s.p))
    redis.call('PEXPIREAT', key, str(write.at))
  end
end
return replies
