-- Pay timeout (SPEC §4): what the cancel path needs besides the foundation's restore journal.
-- Never edited once landed.

-- Seats a cancelled seated order freed in PostgreSQL. The cancel transaction clears
-- `seats.order_id`, so a Redis give-back retried later (by the timeout scanner or by
-- reconciliation) can only learn from here which seats to free in Redis.
ALTER TABLE stock_restore_journal ADD COLUMN seats TEXT[] NOT NULL DEFAULT '{}';

-- Give-backs still owed to Redis, oldest first: the scanner retries these.
CREATE INDEX stock_restore_journal_redis_owed ON stock_restore_journal (restored_at)
    WHERE redis_restored_at IS NULL;

-- The scanner's search for unpaid orders past their deadline whose timeout message was lost.
CREATE INDEX orders_unpaid_by_deadline ON orders (pay_deadline) WHERE status = 'UNPAID';
