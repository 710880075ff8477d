-- Tollgate GCRA: one bucket through `gcra` (algorithm/gcra.lua), the same function as
-- src/algorithm/gcra.rs, kept equal by tests/differential.rs. Contract (KEYS, ARGV, reply,
-- storage): README.md in this folder.
-- State: KEYS[1] is a string "<tat>:<rem>", the theoretical arrival time (TAT)
-- tat + rem / limit µs (0 < rem < limit), or "<tat>" when rem is 0 (Redis then keeps an
-- integer: 32 bytes less per key), expiring at the TAT rounded up.
-- Reply: {allowed 0|1, remaining, reset_us}.

return single(gcra, 'g')
