-- no-transaction
-- `sent` outbox rows, oldest send first, for the leader's retention job: rows that stay
-- behind (`recorded`, `failed`) never stand in the way of a prune. A row enters it once,
-- when it is marked sent (an update that already touches the partial indexes of its earlier
-- status). Never edited once landed.
--
-- CONCURRENTLY, alone in its file and outside a transaction (the first line), for the reason
-- the previous migration gives: the outbox is written by every pre-order batch.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_sent_by_time
    ON outbox (sent_at) WHERE status = 'sent';
