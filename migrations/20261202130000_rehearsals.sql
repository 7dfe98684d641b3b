-- Rehearsals: the built-in load generator run against a shadow copy of an activity, with
-- the invariant check at the end. Never edited once landed.

-- A shadow copy of activity `rehearsal_of`: same items, stock, limits and prices under an
-- id of its own (so Redis keys of its own), sold only to the rehearsal's synthetic buyers.
-- The buyer API answers 404 for it to anyone else, so it is never listed or sold to a real
-- buyer. It lives only while its rehearsal runs: the clean-up deletes it with its orders.
ALTER TABLE activities ADD COLUMN rehearsal_of BIGINT REFERENCES activities (id);
CREATE INDEX activities_rehearsals ON activities (rehearsal_of) WHERE rehearsal_of IS NOT NULL;

-- One rehearsal of one activity: what was asked, where it stands while it runs (`stage`,
-- requests `sent` of `planned`), and its result (outcomes by code, latency percentiles,
-- the invariant checks) once it is over. `shadow_activity_id` has no foreign key: the
-- shadow is deleted by the clean-up, and the id stays to say which keys and rows were its.
-- `updated_at` moves with the progress, so a rehearsal whose instance died is told apart.
CREATE TABLE rehearsals (
    id                  BIGSERIAL PRIMARY KEY,
    activity_id         BIGINT NOT NULL REFERENCES activities (id) ON DELETE CASCADE,
    shadow_activity_id  BIGINT,
    buyers              INTEGER NOT NULL CHECK (buyers > 0),
    rate_per_s          INTEGER NOT NULL CHECK (rate_per_s > 0),
    source              TEXT NOT NULL CHECK (source IN ('console', 'api', 'cli')),
    actor               TEXT NOT NULL,
    reason              TEXT NOT NULL,
    status              TEXT NOT NULL DEFAULT 'running'
                          CHECK (status IN ('running', 'passed', 'failed', 'error')),
    stage               TEXT NOT NULL DEFAULT 'preparing'
                          CHECK (stage IN ('preparing', 'loading', 'settling', 'checking', 'cleaning', 'done')),
    sent                BIGINT NOT NULL DEFAULT 0,
    planned             BIGINT NOT NULL DEFAULT 0,
    result              JSONB,
    error               TEXT,
    cleaned_up          BOOLEAN NOT NULL DEFAULT FALSE,
    started_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    load_started_at     TIMESTAMPTZ,
    load_ended_at       TIMESTAMPTZ,
    ended_at            TIMESTAMPTZ
);
CREATE INDEX rehearsals_by_activity ON rehearsals (activity_id, id DESC);

-- One rehearsal per activity at a time: a second start conflicts here, whichever instance
-- it comes to.
CREATE UNIQUE INDEX rehearsals_one_running ON rehearsals (activity_id) WHERE status = 'running';
