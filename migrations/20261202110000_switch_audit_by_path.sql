-- The readiness check reads the latest flip of each sale switch.
CREATE INDEX switch_audit_by_path ON switch_audit (path, created_at DESC);
