-- Tollgate fixed window over a calendar period: one bucket through `calendar`
-- (algorithm/fixed_window.lua), the same function as src/algorithm/fixed_window.rs with
-- `Params::period`, kept equal by tests/differential.rs. Called as the single scripts, with
-- <unit_us> the period's end and <burst> its start (README.md, "Calendar periods").
-- State: KEYS[1] is a hash {s = the period's start µs, c = count, p = its end}, expiring
-- at its end. Reply: {allowed 0|1, remaining, reset_us}.

return single(calendar, 'c')
