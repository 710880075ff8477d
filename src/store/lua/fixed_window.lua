-- Tollgate fixed window (epoch-aligned, as envoyproxy/ratelimit, but a denial consumes
-- nothing): one bucket through `fixed` (algorithm/fixed_window.lua), the same function as
-- src/algorithm/fixed_window.rs, kept equal by tests/differential.rs. Contract (KEYS,
-- ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a hash {s = window start µs, c = count, p = 0}, expiring at the
-- window's end. Reply: {allowed 0|1, remaining, reset_us}.

return single(fixed, 'f')
