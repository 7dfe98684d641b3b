-- A rehearsal's copy names its rehearsal on its own row, written by the very INSERT that
-- creates it: a row is a copy exactly when it names both the activity it copies and its
-- rehearsal, so no copy can ever exist unmarked, whatever becomes of the instance making it
-- (an unmarked copy would be a real sale of the same goods, listed and opened as any other).
ALTER TABLE activities ADD COLUMN rehearsal_id BIGINT REFERENCES rehearsals (id);

-- Copies made before this column existed are found through their rehearsal's row.
UPDATE activities a SET rehearsal_id = r.id
FROM rehearsals r
WHERE r.shadow_activity_id = a.id AND a.rehearsal_of IS NOT NULL;

-- NOT VALID: a copy an older version left without a rehearsal cannot be given one; every
-- row written from now on is checked.
ALTER TABLE activities ADD CONSTRAINT activities_copy_names_its_rehearsal
    CHECK ((rehearsal_of IS NULL) = (rehearsal_id IS NULL)) NOT VALID;

-- One copy per rehearsal.
CREATE UNIQUE INDEX activities_copy_of_rehearsal ON activities (rehearsal_id)
    WHERE rehearsal_id IS NOT NULL;

-- A rehearsal whose clean-up failed (or whose instance died) waits at stage
-- 'cleanup_failed' until the leader's retries remove its copy; only then is it 'done'.
ALTER TABLE rehearsals DROP CONSTRAINT rehearsals_stage_check;
ALTER TABLE rehearsals ADD CONSTRAINT rehearsals_stage_check
    CHECK (stage IN ('preparing', 'loading', 'settling', 'checking', 'cleaning',
                     'cleanup_failed', 'done'));
CREATE INDEX rehearsals_to_clean ON rehearsals (id) WHERE stage = 'cleanup_failed';
