-- The season board's score, owned by the leaderboard (src/features/leaderboard/mod.rs
-- encodes and decodes it the same way):
--   score = points * 2^22 + (2^22 - 1 - seconds since the season began)
-- More points rank higher, and of equal points whoever reached them first ranks higher. A
-- month has fewer than 2^22 seconds; scores stay exact doubles up to 2^31 points.
local SCORE_TIME_UNIT = 4194304
local function board_points(score)
  return math.floor(score / SCORE_TIME_UNIT)
end
local function board_score(points, season_seconds)
  return points * SCORE_TIME_UNIT + (SCORE_TIME_UNIT - 1 - season_seconds)
end
