-- What the leader's retention job (`server/src/retention/`) prunes by time, found by time.
-- Never edited once landed.
--
-- `processed_events` has no other order than its key (consumer, event id): without this
-- index, each pruning statement and the age of the oldest row would read the whole table.
-- One entry per create-order event, which is a batch of pre-orders: a small part of what a
-- completion writes.
CREATE INDEX processed_events_by_time ON processed_events (processed_at);

-- `sent` outbox rows, oldest send first: rows that stay behind (`recorded`, `failed`) never
-- stand in the way of a prune. A row enters it once, when it is marked sent (an update
-- that already touches the partial indexes of its earlier status).
CREATE INDEX outbox_sent_by_time ON outbox (sent_at) WHERE status = 'sent';
