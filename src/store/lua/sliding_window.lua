-- Tollgate sliding window (two-epoch weighted counter): one bucket through `sliding`
-- (algorithm/sliding_window.lua), the same function as src/algorithm/sliding_window.rs,
-- kept equal by tests/differential.rs. Contract (KEYS, ARGV, reply, storage): README.md in this folder.
-- State: KEYS[1] is a hash {s = window start µs, c = current count, p = previous count},
-- expiring two windows after s. Reply: {allowed 0|1, remaining, reset_us}.

return single(sliding, 's')
