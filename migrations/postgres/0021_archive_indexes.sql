-- Fewer index pages written per award: a day's awards in the order they arrive. Every award
-- of today goes to the end of the index, where (award_date, user_id) put each at its
-- user's place. Today's totals, the one reader, group the day's rows themselves.
-- (`vote_log` keeps its key here: a partitioned table's key must hold the partition's.)
DROP INDEX points_record_by_date;
CREATE INDEX points_record_by_date ON points_record (award_date);
