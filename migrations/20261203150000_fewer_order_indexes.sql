-- Two indexes of `orders` that every pre-order and every completion paid for and no query
-- needs. Never edited once landed.
--
-- `orders_by_buyer` (activity, item, buyer) served the per-buyer counts before
-- `buyer_holdings` kept them; no statement looks orders up by buyer within an item any more
-- (idempotency goes through the unique (user_id, request_id) key). Its entries land at
-- random places, so each insert and each non-HOT status change touched a cold leaf page,
-- written in full to the WAL after every checkpoint.
DROP INDEX orders_by_buyer;

-- `orders_pre_created` repeated `orders_by_activity` (activity, status, created_at), which
-- finds an activity's stuck pre-orders oldest first just as well. Worse than the write it
-- cost: a pre-order leaves it within milliseconds, its entry stays until a vacuum, and the
-- planner, taking the partial index for small, ANDed it into the create-order consumer's
-- lookup by key: a bitmap of every pre-order of the sale read for each batch (3.5 ms for a
-- batch of 200 after 100,000 orders).
DROP INDEX orders_pre_created;
