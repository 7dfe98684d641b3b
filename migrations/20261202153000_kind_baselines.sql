-- The baseline of a kind of activity: an operator marks a run as the baseline of every
-- activity of its activity's kind ('standard' or 'seated'), so a new activity of that kind
-- is held against it before it has a run of its own. An activity's own baseline
-- (`baseline_runs.is_baseline`) wins over its kind's. Marking another run of the kind
-- replaces the row; deleting the run (its activity deleted) removes it.
CREATE TABLE kind_baselines (
    kind TEXT PRIMARY KEY CHECK (kind IN ('standard', 'seated')),
    -- The kind is its activity's when marked; a run is the baseline of one kind at most.
    run_id BIGINT NOT NULL UNIQUE REFERENCES baseline_runs (id) ON DELETE CASCADE,
    marked_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
