-- Tollgate GCRA, written once: every script that decides a GCRA bucket (gcra.lua,
-- joint.lua) is built with this file (src/store/redis/scripts.rs concatenates prelude.lua, the
-- algorithm files a script needs, then its entry). The same function as
-- src/algorithm/gcra.rs, kept equal by tests/differential.rs. (st, now, limit, unit,
-- burst, mode, n) -> allowed, remaining, reset_us, write: st is a decoded state
-- (prelude.lua, read_state); allowed is 0|1; write is as put takes it (a denial writes
-- nothing). Several results rather than a reply table: a table is an allocation per call. mode is 0 (consume n), 1 (peek), 2 (refund n) or 3 (overdraw n), checked by the caller; unit
-- >= 1.

-- GCRA (src/algorithm/gcra.rs). Durations are pairs (us, frac): us + frac / limit µs,
-- 0 <= frac < limit, so that an emission interval unit / limit is never rounded. Rust:
-- gcra::Span. The helpers take limit (and unit) as arguments rather than closing over
-- them: a closure built per call costs every call an allocation.

-- a + b, the µs saturating; the carry test never forms a sum that could pass 2^53.
local function gcra_plus(au, af, bu, bf, limit)
  if af >= limit - bf then return add(add(au, bu), 1), af - (limit - bf) end
  return add(au, bu), af + bf
end

-- a - b, for a >= b.
local function gcra_minus(au, af, bu, bf, limit)
  if af >= bf then return au - bu, af - bf end
  return au - bu - 1, af + (limit - bf)
end

-- Rounded up to whole µs.
local function gcra_ceil(u, f)
  if f > 0 then return add(u, 1) end
  return u
end

-- An allowed answer for a bucket (u, f) ahead of now (1, remaining, reset_us): remaining
-- is burst - ceil(d * limit / unit), the emissions d covers, counting a started one.
local function gcra_allowed(u, f, limit, unit, burst)
  local q, r = muldiv(u, limit, unit)
  local fq = div(f, unit)
  local fr = f - fq * unit
  local carry = 0
  if r > unit - fr then carry = 2 elseif r > 0 or fr > 0 then carry = 1 end
  return 1, math.max(burst - add(add(q, fq), carry), 0), gcra_ceil(u, f)
end

-- Allowed, leaving the TAT (u, f) ahead of now: store it, or drop it when it is now.
local function gcra_store(now, u, f, limit, unit, burst)
  local allowed, remaining, reset = gcra_allowed(u, f, limit, unit, burst)
  if u == 0 and f == 0 then return allowed, remaining, reset, false end
  local tat = add(now, u)
  -- An instant that saturates is MAX exactly (time stands still there).
  local rem = f
  if tat == MAX then rem = 0 end
  return allowed, remaining, reset, {kind = 'g', t = tat, r = rem, at = ms_ceil(gcra_ceil(tat, rem))}
end

local function gcra(st, now, limit, unit, burst, mode, n)
  if limit == 0 then
    -- Blocks everything without dividing; a refund has nothing to give back.
    if mode == 2 then return 1, 0, 0 end
    return 0, 0, unit
  end
  -- The tolerance: burst emissions, k emissions being k * unit / limit µs, exactly.
  local tol_u, tol_f = muldiv(burst, unit, limit)
  -- ahead = max(tat, now) - now. A remainder stored under another limit (before a reload)
  -- is clamped below this one (< 1 µs).
  local ahead_u, ahead_f = 0, 0
  if st and st.kind == 'g' and st.t >= now then
    ahead_u, ahead_f = st.t - now, math.min(st.r, limit - 1)
  end
  if mode == 0 then
    local eu, ef = muldiv(n, unit, limit)
    local nu, nf = gcra_plus(ahead_u, ahead_f, eu, ef, limit)
    if nu < tol_u or (nu == tol_u and nf <= tol_f) then return gcra_store(now, nu, nf, limit, unit, burst) end
    return 0, 0, gcra_ceil(gcra_minus(nu, nf, tol_u, tol_f, limit))
  elseif mode == 3 then
    -- Overdraw: stored whether or not it fits, the TAT at most at the ceiling; past the
    -- tolerance, denied until one hit fits.
    local eu, ef = muldiv(n, unit, limit)
    local nu, nf = gcra_plus(ahead_u, ahead_f, eu, ef, limit)
    -- The ceiling, tolerance + unit (limit emissions are exactly unit): a debt of at most
    -- one unit of the limit.
    local cap_u, cap_f = gcra_plus(tol_u, tol_f, unit, 0, limit)
    if nu > cap_u or (nu == cap_u and nf > cap_f) then nu, nf = cap_u, cap_f end
    local allowed, remaining, reset, write = gcra_store(now, nu, nf, limit, unit, burst)
    if nu < tol_u or (nu == tol_u and nf <= tol_f) then return allowed, remaining, reset, write end
    local ou, of = muldiv(1, unit, limit)
    local pu, pf = gcra_plus(nu, nf, ou, of, limit)
    -- Only a TAT saturated at MAX can make that sum not pass the tolerance: then 1 µs.
    if pu < tol_u or (pu == tol_u and pf <= tol_f) then return 0, 0, 1, write end
    return 0, 0, gcra_ceil(gcra_minus(pu, pf, tol_u, tol_f, limit)), write
  elseif mode == 1 then
    local eu, ef = muldiv(1, unit, limit)
    local nu, nf = gcra_plus(ahead_u, ahead_f, eu, ef, limit)
    if nu < tol_u or (nu == tol_u and nf <= tol_f) then return gcra_allowed(ahead_u, ahead_f, limit, unit, burst) end
    -- One hit passes sooner than the bucket is full: report full.
    if eu < tol_u or (eu == tol_u and ef <= tol_f) then return 0, 0, gcra_ceil(ahead_u, ahead_f) end
    -- burst == 0 admits nothing (not even on an empty bucket): report ahead + emission.
    return 0, 0, gcra_ceil(gcra_minus(nu, nf, tol_u, tol_f, limit))
  end
  local bu, bf = muldiv(n, unit, limit)
  if ahead_u < bu or (ahead_u == bu and ahead_f <= bf) then return gcra_store(now, 0, 0, limit, unit, burst) end
  local u, f = gcra_minus(ahead_u, ahead_f, bu, bf, limit)
  return gcra_store(now, u, f, limit, unit, burst)
end
