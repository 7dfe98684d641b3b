-- Hot keys: each period during which a key was in force, detected by the leader or added
-- by an operator, kept for the console's history of the last hours. The keys in force
-- themselves live in etcd under leases; this table only remembers them.
CREATE TABLE hotkey_periods (
    id BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('item', 'user', 'ip')),
    -- Canonical key text: an id in digits or an IP address, so 64 characters are plenty.
    key TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 64),
    action TEXT NOT NULL CHECK (action IN ('watch', 'cache', 'limit', 'block')),
    source TEXT NOT NULL CHECK (source IN ('detected', 'manual')),
    -- The highest summed rate seen while it was hot (0 for a manual key).
    peak_rate_per_s BIGINT NOT NULL DEFAULT 0 CHECK (peak_rate_per_s >= 0),
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    ended_at TIMESTAMPTZ,
    actor TEXT,
    reason TEXT
);

-- One open period per key: a key renewed by a new leader after a takeover continues the
-- period the old leader opened instead of starting a second one.
CREATE UNIQUE INDEX hotkey_periods_open ON hotkey_periods (kind, key) WHERE ended_at IS NULL;

-- The history page reads the latest periods first.
CREATE INDEX hotkey_periods_started ON hotkey_periods (started_at DESC);
