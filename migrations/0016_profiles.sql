-- Profiles and the lifecycle of remarks.

-- A user's own words on their profile (name and avatar were there from the start).
ALTER TABLE users ADD COLUMN bio TEXT;

-- A profile's follower and following lists, newest first: read by range, never sorted.
CREATE INDEX follows_followers_newest ON follows (followee_id, created_at_ms, follower_id);
CREATE INDEX follows_following_newest ON follows (follower_id, created_at_ms, followee_id);

-- A remark edited, deleted by its author or an admin, or hidden (folded) by a moderator.
-- A deleted remark keeps its row (the vote archive refers to it); a hidden one is shown to
-- its author and admins only.
ALTER TABLE remarks ADD COLUMN edited_at_ms BIGINT;
ALTER TABLE remarks ADD COLUMN deleted_at_ms BIGINT;
ALTER TABLE remarks ADD COLUMN hidden_at_ms BIGINT;
ALTER TABLE remarks ADD COLUMN hidden_reason TEXT;

-- A voter's likes, newest first (`myLikes`), read from the archive.
CREATE INDEX vote_log_by_voter_newest ON vote_log (voter_id, event_order);

-- Each item's rating summary: how many listed remarks (neither deleted nor hidden) give it
-- each number of stars, moved in the transaction of each remark's create, edit, delete
-- and hide.
CREATE TABLE item_ratings (
    item_id BIGINT PRIMARY KEY,
    stars_1 BIGINT NOT NULL DEFAULT 0,
    stars_2 BIGINT NOT NULL DEFAULT 0,
    stars_3 BIGINT NOT NULL DEFAULT 0,
    stars_4 BIGINT NOT NULL DEFAULT 0,
    stars_5 BIGINT NOT NULL DEFAULT 0
);
INSERT INTO item_ratings (item_id, stars_1, stars_2, stars_3, stars_4, stars_5)
SELECT item_id,
       SUM(CASE WHEN score = 1 THEN 1 ELSE 0 END),
       SUM(CASE WHEN score = 2 THEN 1 ELSE 0 END),
       SUM(CASE WHEN score = 3 THEN 1 ELSE 0 END),
       SUM(CASE WHEN score = 4 THEN 1 ELSE 0 END),
       SUM(CASE WHEN score = 5 THEN 1 ELSE 0 END)
FROM remarks GROUP BY item_id;
