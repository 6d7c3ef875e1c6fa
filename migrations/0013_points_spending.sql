-- Points as currency: spends and revokes are points_record rows with negative points
-- (a spend's kind is SPEND, a revoke's the revoked award's), each with the reason it was
-- given. Awards have none.
ALTER TABLE points_record ADD COLUMN reason TEXT;
