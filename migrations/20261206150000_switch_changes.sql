-- Changes to a switch that wait: scheduled for a time, waiting for a second person's
-- approval, or applied with a revert still due. Never edited once landed.
--
-- A change waits here, in PostgreSQL, not in etcd: instances watch etcd and would take a
-- waiting value for one in force. The leader claims a due row under `FOR UPDATE SKIP LOCKED`,
-- writes etcd once (guarded by a marker key, see docs/control-plane.md) and commits the row's
-- new state in the same transaction.
CREATE TABLE switch_changes (
    id BIGSERIAL PRIMARY KEY,
    -- Relative to the etcd prefix, canonical (`switches/entry/42`).
    path TEXT NOT NULL,
    -- The value as it will be stored, validated when the change was made.
    value TEXT NOT NULL,
    reason TEXT NOT NULL,
    proposer TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('console', 'api', 'cli')),
    state TEXT NOT NULL CHECK (state IN ('scheduled', 'pending_approval', 'applied',
        'reverted', 'cancelled', 'rejected')),
    -- When the leader applies it; absent: as soon as it may (an approval).
    apply_at TIMESTAMPTZ,
    -- Set the key back to the value it replaced this long after applying it.
    revert_after_s INTEGER CHECK (revert_after_s > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    applied_at TIMESTAMPTZ,
    -- The etcd revision the change made, compared before a revert: any other write since
    -- means someone changed the key meanwhile.
    applied_revision BIGINT,
    -- The value the change replaced (absent: the key was absent, its setting applied).
    replaced_value TEXT,
    revert_at TIMESTAMPTZ,
    -- Why a due revert was dropped; set, the revert is no longer due.
    revert_dropped TEXT,
    -- Who approved, rejected or cancelled it, and why.
    decided_by TEXT,
    decided_reason TEXT,
    decided_at TIMESTAMPTZ,
    CHECK (state <> 'scheduled' OR apply_at IS NOT NULL),
    CHECK (state NOT IN ('applied', 'reverted') OR (applied_at IS NOT NULL AND applied_revision IS NOT NULL)),
    CHECK ((revert_at IS NULL) = (revert_after_s IS NULL OR applied_at IS NULL))
);

-- The leader's two scans: changes due, and reverts due.
CREATE INDEX switch_changes_due ON switch_changes (apply_at) WHERE state = 'scheduled';
CREATE INDEX switch_changes_revert_due ON switch_changes (revert_at)
    WHERE state = 'applied' AND revert_at IS NOT NULL AND revert_dropped IS NULL;
CREATE INDEX switch_changes_created ON switch_changes (created_at DESC, id DESC);

-- Each flip a change made (its application, its revert) names it; a flip made at once by
-- an admin without the approval a key needs says so.
ALTER TABLE switch_audit ADD COLUMN change_id BIGINT;
ALTER TABLE switch_audit ADD COLUMN emergency BOOLEAN NOT NULL DEFAULT false;
