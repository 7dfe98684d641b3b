-- The control plane's audit (SPEC §5): a switch change written straight into etcd (not
-- through the admin API, console or CLI) is noticed by every instance's watcher, and each
-- of them offers it to switch_audit. This index makes the first offer win and the others
-- no-ops, so the change is recorded exactly once. The value is part of the key so that an
-- etcd cluster rebuilt from scratch (revisions start again) does not swallow a new change
-- that happens to reuse an old revision of the same path.
CREATE UNIQUE INDEX switch_audit_external_once
    ON switch_audit (path, etcd_revision, new_value)
    WHERE source = 'external';

