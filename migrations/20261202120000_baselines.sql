-- Baselines: every instance's figures (counters since it started, a few levels) written
-- periodically, and the runs the leader computes from them once an activity's sale ended.
-- Reports are raw material, pruned after two days; runs are kept.
CREATE TABLE baseline_reports (
    -- The instance's node id: one per process unless configured.
    node_id TEXT NOT NULL,
    taken_at TIMESTAMPTZ NOT NULL,
    figures JSONB NOT NULL,
    PRIMARY KEY (node_id, taken_at)
);

-- A run reads every instance's reports around its window; pruning reads the oldest.
CREATE INDEX baseline_reports_taken_at ON baseline_reports (taken_at);

CREATE TABLE baseline_runs (
    id BIGSERIAL PRIMARY KEY,
    activity_id BIGINT NOT NULL REFERENCES activities (id) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ('sale', 'rehearsal')),
    started_at TIMESTAMPTZ NOT NULL,
    ended_at TIMESTAMPTZ NOT NULL CHECK (ended_at >= started_at),
    is_baseline BOOLEAN NOT NULL DEFAULT FALSE,
    -- The wire shapes of `contract::{RunPerf, RunCost, RunPath}`.
    perf JSONB NOT NULL,
    cost JSONB NOT NULL,
    path JSONB NOT NULL,
    computed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One sale run per activity, whichever leader computes it first; rehearsals are many.
CREATE UNIQUE INDEX baseline_runs_one_sale ON baseline_runs (activity_id) WHERE kind = 'sale';
-- One baseline per activity.
CREATE UNIQUE INDEX baseline_runs_one_baseline ON baseline_runs (activity_id) WHERE is_baseline;
