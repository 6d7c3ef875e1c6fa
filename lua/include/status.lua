-- What a script answers first: one vocabulary for every script. src/infra/redis/status.rs
-- names the same codes, and turns each refusal into its error in one match.
local OK = 0            -- done, as asked
local ALREADY = 1       -- done before: nothing changed (signed in today, order settled)
local MISSING = -1      -- Redis lacks what SQL holds: restore it from SQL, then call again
local ASK_ARCHIVE = -2  -- older than Redis remembers: ask SQL, then call again with its answer
local NOT_YET = -3      -- too early: the sale has not started, the order is not due to expire
local ENDED = -4        -- too late: the sale has ended
local TAKEN = -5        -- one per person (or per id), and there is one already
local SOLD_OUT = -6     -- no stock left
local NOT_FOUND = -7    -- no such thing for this caller (another buyer's order)
local OVER_LIMIT = -8   -- an allowance is used up, or a budget would be exceeded
local HELD = -9         -- a rebuild holds writes back: call again shortly
local MOVED = -10       -- what the caller read changed meanwhile: read again, call again
