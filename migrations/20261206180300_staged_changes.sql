-- Staged rollouts: a change in force on chosen instances only, until an operator promotes
-- it to every instance or aborts it (or the leader aborts it on a worse error rate).
--
-- The staged value lives in etcd under `staged/{path}` while the stage lasts (instances
-- watch it there); this row is where the change's state, its instances and its decisions
-- are kept.
ALTER TABLE switch_changes DROP CONSTRAINT switch_changes_state_check;
ALTER TABLE switch_changes ADD CONSTRAINT switch_changes_state_check CHECK (state IN (
    'scheduled', 'pending_approval', 'applied', 'reverted', 'cancelled', 'rejected',
    'staged', 'aborted'));

-- The instances a stage names, or chose when it was staged for a percentage.
ALTER TABLE switch_changes ADD COLUMN stage_instances TEXT[];
-- The share of the live instances a stage was asked for, when it named none.
ALTER TABLE switch_changes ADD COLUMN stage_percent SMALLINT
    CHECK (stage_percent BETWEEN 1 AND 99);
-- When the stage went into force on its instances.
ALTER TABLE switch_changes ADD COLUMN staged_at TIMESTAMPTZ;

ALTER TABLE switch_changes ADD CONSTRAINT switch_changes_stage_has_instances
    CHECK (state <> 'staged' OR (stage_instances IS NOT NULL AND staged_at IS NOT NULL));
-- A stage is promoted or aborted by hand (or by the leader), never reverted by time.
ALTER TABLE switch_changes ADD CONSTRAINT switch_changes_stage_without_revert
    CHECK ((stage_instances IS NULL AND stage_percent IS NULL) OR revert_after_s IS NULL);

-- The leader looks at the staged changes every second.
CREATE INDEX switch_changes_staged ON switch_changes (id) WHERE state = 'staged';
