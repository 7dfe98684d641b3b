-- no-transaction
-- The holdings of an item that gained units after a number (20261206130000), found without
-- reading the item's other holdings. Never edited once landed.
--
-- CONCURRENTLY, alone in its file and outside a transaction (the first line): a plain build
-- holds a SHARE lock on the table while it reads it whole, which would stop every pre-order
-- of a live sale meanwhile. A build that fails half-way leaves an invalid index, which the
-- holder sets still work without (only reading more); drop it and migrate again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS buyer_holdings_by_gain
    ON buyer_holdings (activity_id, item_id, gained);
