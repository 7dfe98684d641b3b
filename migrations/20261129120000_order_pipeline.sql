-- The order pipeline (SPEC §4) and the control plane's bookkeeping (SPEC §5): what the
-- create-order and pay-timeout consumers, the payment center, the dead-letter sink and the
-- ops actions need besides the foundation's tables. Never edited once landed.

-- `recorded`: written while the async switch is on `record`; the relay leaves these alone
-- until an ops replay turns them back into `pending` (SPEC §5, seed 001 §6.2).
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('recorded', 'pending', 'sent', 'failed'));
CREATE INDEX outbox_recorded ON outbox (id) WHERE status = 'recorded';
CREATE INDEX outbox_failed ON outbox (id) WHERE status = 'failed';

-- Every status change of an order, written by a trigger so that no code path can move an
-- order without leaving its history (the console's order detail reads this).
CREATE TABLE order_events (
    id           BIGSERIAL PRIMARY KEY,
    order_id     UUID NOT NULL REFERENCES orders (id),
    from_status  TEXT NOT NULL,
    to_status    TEXT NOT NULL,
    at           TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX order_events_by_order ON order_events (order_id, id);

CREATE FUNCTION record_order_event() RETURNS trigger AS $$
BEGIN
    INSERT INTO order_events (order_id, from_status, to_status)
    VALUES (NEW.id, OLD.status, NEW.status);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER orders_status_history
    AFTER UPDATE OF status ON orders
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION record_order_event();

-- Units each buyer holds of an activity item, in orders that keep stock; moved in the same
-- transactions as `activity_items.allocated`. Its CHECK is the database's guard on the
-- per-user limit, so no switch flip or Redis drift can take a buyer past it (SPEC §11.2).
CREATE TABLE buyer_holdings (
    activity_id     BIGINT NOT NULL,
    item_id         BIGINT NOT NULL,
    user_id         BIGINT NOT NULL,
    units           INTEGER NOT NULL CHECK (units >= 0),
    per_user_limit  INTEGER NOT NULL,
    PRIMARY KEY (activity_id, item_id, user_id),
    FOREIGN KEY (activity_id, item_id) REFERENCES activity_items (activity_id, item_id) ON DELETE CASCADE,
    CHECK (units <= per_user_limit)
);
-- Orders written before this table existed.
INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
SELECT o.activity_id, o.item_id, o.user_id, SUM(o.quantity), GREATEST(ai.per_user_limit, SUM(o.quantity))
FROM orders o JOIN activity_items ai USING (activity_id, item_id)
WHERE o.status NOT IN ('CANCELLED', 'FAILED')
GROUP BY o.activity_id, o.item_id, o.user_id, ai.per_user_limit;

-- The simulated payment center's trades (SPEC §4 "keeps trades in the DB"). One open trade
-- per order at most; `trade_no` is what the buyer and the callback carry.
CREATE TABLE payment_trades (
    trade_no      TEXT PRIMARY KEY,
    order_id      UUID NOT NULL REFERENCES orders (id),
    amount_cents  BIGINT NOT NULL CHECK (amount_cents >= 0),
    status        TEXT NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    paid_at       TIMESTAMPTZ,
    notified_at   TIMESTAMPTZ,
    notify_attempts INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX payment_trades_one_open ON payment_trades (order_id) WHERE status <> 'failed';

-- Messages that reached the dead-letter queue, kept for inspection and requeue. The sink
-- copies each one here before acking it, so the console shows payload and reason.
CREATE TABLE dead_letters (
    id            BIGSERIAL PRIMARY KEY,
    source_queue  TEXT NOT NULL,
    routing_key   TEXT NOT NULL,
    message_id    TEXT,
    payload       BYTEA NOT NULL,
    reason        TEXT NOT NULL,
    death_count   BIGINT NOT NULL DEFAULT 1,
    received_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    requeued_at   TIMESTAMPTZ,
    requeued_by   TEXT
);
CREATE INDEX dead_letters_waiting ON dead_letters (id) WHERE requeued_at IS NULL;

-- Operator actions that are not switch flips (dead-letter requeue, recorded-order replay,
-- reconciliation repairs): who did what to which target, and what came of it.
CREATE TABLE ops_audit (
    id          BIGSERIAL PRIMARY KEY,
    actor       TEXT NOT NULL,
    source      TEXT NOT NULL CHECK (source IN ('console', 'api', 'cli', 'system')),
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    detail      JSONB NOT NULL DEFAULT '{}',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ops_audit_recent ON ops_audit (created_at DESC);
