-- A rehearsal's load is recorded as a run of its activity (kind 'rehearsal'), once: the
-- run names the rehearsal it measured, so two leaders cannot record it twice.
ALTER TABLE baseline_runs
    ADD COLUMN rehearsal_id BIGINT UNIQUE REFERENCES rehearsals (id) ON DELETE CASCADE;
