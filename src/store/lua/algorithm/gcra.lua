-- Tollgate GCRA, written once: every script that decides a GCRA bucket (gcra.lua,
-- joint.lua) is built with this file (src/store/redis/scripts.rs concatenates prelude.lua, the
-- algorithm files a script needs, then its entry). The same function as
-- src/algorithm/gcra.rs, kept equal by tests/differential.rs. (st, now, limit, unit,
-- burst, mode, n) -> reply, write: st is a decoded state (prelude.lua, read_state); reply
-- is {allowed 0|1, remaining, reset_us}; write is as put takes it (a denial writes
-- nothing). mode is 0 (consume n), 1 (peek) or 2 (refund n), checked by the caller; unit
-- >= 1.

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
