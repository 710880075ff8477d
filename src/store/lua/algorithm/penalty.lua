-- Tollgate penalties, written once: every script that decides a bucket (gcra.lua,
-- sliding_window.lua, fixed_window.lua, joint.lua, batch.lua) is built with this file after
-- its algorithm files. The same function as src/algorithm/penalty.rs (with the dispatch of
-- src/algorithm/mod.rs), kept equal by tests/differential.rs. A decoded state's u is the
-- end of its penalty (µs; absent: none).

-- When the state st (decoded, not nil) carries no information any more (µs), as the
-- algorithms' own writes expire it: GCRA at the TAT rounded up, a sliding window two
-- windows after its start, a fixed window at its end (algo: 'g', 's', 'f').
local function penalty_expiry(st, algo, unit)
  if st.kind == 'g' then
    if st.r > 0 then return add(st.t, 1) end
    return st.t
  end
  local exp = add(st.s, unit)
  if algo == 's' then exp = add(exp, unit) end
  return exp
end

-- The state st (decoded, nil if none) marked with a penalty ending at ends, with its
-- expiry (ms, as put takes it): the later of ends and when the state itself expires. A
-- state past its own expiry is marked as a fresh bucket's (Redis may not have dropped it
-- yet; the memory store has).
local function penalty_mark(st, now, algo, unit, ends)
  if st and penalty_expiry(st, algo, unit) <= now then st = nil end
  local m
  if st and st.kind == 'g' then
    m = {kind = 'g', t = st.t, r = st.r, u = ends}
  elseif st then
    m = {kind = 'w', s = st.s, c = st.c, p = st.p, u = ends}
  elseif algo == 'g' then
    m = {kind = 'g', t = now, r = 0, u = ends}
  else
    local s = now - (now - div(now, unit) * unit)
    m = {kind = 'w', s = s, c = 0, p = 0, u = ends}
  end
  m.at = ms_ceil(math.max(penalty_expiry(m, algo, unit), ends))
  return m
end

-- The algorithm run (gcra, sliding or fixed) on st, with the limit's penalty (µs, 0:
-- none): a bucket penalized at now denies (a refund is answered allowed, with nothing
-- admissible) and writes nothing; a consume the algorithm denies starts a penalty (the
-- state as read, marked). Results as the algorithms': allowed, remaining, reset_us, write.
local function charge(run, algo, st, now, limit, unit, burst, mode, n, penalty)
  local u = st and st.u
  if u and now < u then
    if mode == 2 then return 1, 0, u - now end
    return 0, 0, u - now
  end
  local allowed, remaining, reset, write = run(st, now, limit, unit, burst, mode, n)
  if penalty == 0 or allowed == 1 or mode ~= 0 then return allowed, remaining, reset, write end
  return 0, 0, math.max(reset, penalty), penalty_mark(st, now, algo, unit, add(now, penalty))
end
