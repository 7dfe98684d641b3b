-- no-transaction
-- What the leader's retention job (`server/src/retention/`) prunes by time, found by time.
-- Never edited once landed.
--
-- `processed_events` has no other order than its key (consumer, event id): without this
-- index, each pruning statement and the age of the oldest row would read the whole table.
-- One entry per create-order event, which is a batch of pre-orders: a small part of what a
-- completion writes.
--
-- CONCURRENTLY, alone in its file and outside a transaction (the first line): a plain build
-- holds a SHARE lock on the table while it reads it whole, which would stop every completion
-- of a live sale meanwhile. A build that fails half-way leaves an invalid index, which
-- `seckill_table_*` and the prune still work without (only slower); drop it and restart.
CREATE INDEX CONCURRENTLY IF NOT EXISTS processed_events_by_time
    ON processed_events (processed_at);
