-- Reconciliation (docs/reconciliation.md): runs with their progress and findings, what the
-- ledger and the runs read per item, and when an activity was last loaded into Redis.
-- Never edited once landed.

-- One run over one activity: a report, or a repair of the safe classes. `done`/`total`
-- count the activity's items; `updated_at` moves with the progress, so a run whose
-- instance died is told apart from one still working.
CREATE TABLE reconciliation_runs (
    id           BIGSERIAL PRIMARY KEY,
    activity_id  BIGINT NOT NULL REFERENCES activities (id) ON DELETE CASCADE,
    repair       BOOLEAN NOT NULL,
    trigger      TEXT NOT NULL CHECK (trigger IN ('console', 'api', 'cli', 'auto')),
    actor        TEXT NOT NULL,
    reason       TEXT,
    status       TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed')),
    done         INTEGER NOT NULL DEFAULT 0,
    total        INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at     TIMESTAMPTZ,
    CHECK (NOT repair OR reason IS NOT NULL)
);
CREATE INDEX reconciliation_runs_by_activity ON reconciliation_runs (activity_id, id DESC);

-- What a run found, and what it did about each finding.
CREATE TABLE reconciliation_findings (
    id        BIGSERIAL PRIMARY KEY,
    run_id    BIGINT NOT NULL REFERENCES reconciliation_runs (id) ON DELETE CASCADE,
    class     TEXT NOT NULL CHECK (class IN ('REDIS_DEDUCTED_NO_ORDER', 'ORDER_NOT_IN_REDIS',
                'PREORDER_STUCK', 'UNPAID_PAST_DEADLINE', 'RESTORE_INCOMPLETE', 'REDIS_MISSING')),
    item_id   BIGINT NOT NULL,
    order_id  UUID,
    user_id   BIGINT,
    units     BIGINT NOT NULL,
    action    TEXT NOT NULL CHECK (action IN ('repaired', 'flagged', 'none')),
    detail    TEXT NOT NULL
);
CREATE INDEX reconciliation_findings_by_run ON reconciliation_findings (run_id, id);

-- The ledger sums an item's restore journal; without this it would scan every cancel.
CREATE INDEX stock_restore_journal_by_item ON stock_restore_journal (activity_id, item_id);

-- Stuck pre-orders of an activity, oldest first, without reading its other orders.
CREATE INDEX orders_pre_created ON orders (activity_id, created_at) WHERE status = 'PRE_CREATED';

-- When the activity was last loaded into Redis (pre-warm, repair): an item that should be
-- there and is not is Redis state lost, not an activity nobody pre-warmed.
ALTER TABLE activities ADD COLUMN prewarmed_at TIMESTAMPTZ;
