-- Tollgate: this build of the scripts reads window keys (prelude.lua, fold):
-- --redis-windows read or plain. Put first, before prelude.lua, by
-- src/store/redis/scripts/sources.rs.
local WINDOW_KEYS = true
