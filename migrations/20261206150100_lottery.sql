-- Lottery sales (docs/lottery.md): an activity either sells to whoever comes first, or hands out the
-- right to buy by a draw among those who registered in a window before the sale. Never edited
-- once landed.
--
-- The lottery's terms live on the activity row, all or none (the check): a first-come activity
-- has no window and no code lifetime, a lottery has both.
ALTER TABLE activities
    ADD COLUMN mode TEXT NOT NULL DEFAULT 'first_come'
        CHECK (mode IN ('first_come', 'lottery')),
    ADD COLUMN registration_opens_at TIMESTAMPTZ,
    ADD COLUMN registration_closes_at TIMESTAMPTZ,
    ADD COLUMN code_ttl_s INTEGER CHECK (code_ttl_s BETWEEN 60 AND 86400),
    ADD CONSTRAINT activities_lottery_terms CHECK (
        (mode = 'lottery') = (registration_opens_at IS NOT NULL
                              AND registration_closes_at IS NOT NULL
                              AND code_ttl_s IS NOT NULL)
        AND (mode <> 'lottery' OR (registration_opens_at < registration_closes_at
                                   AND registration_closes_at <= starts_at)));

-- The draw's secret seed, one per lottery activity, written once (never replaced, whatever
-- edits the activity gets) when the activity becomes a lottery, so its commitment is fixed
-- before anyone registers. A table of its own, so no read of the activity row can carry the
-- seed out before the draw; `revealed_at` is set once every item is drawn, and only then does
-- the buyer API show the seed.
CREATE TABLE lottery_seeds (
    activity_id BIGINT PRIMARY KEY REFERENCES activities (id) ON DELETE CASCADE,
    seed BYTEA NOT NULL CHECK (length(seed) = 32),
    -- lowercase hex SHA-256 of the seed, shown from the start.
    commitment TEXT NOT NULL,
    revealed_at TIMESTAMPTZ
);

-- One row per drawn item: its presence is what makes the draw happen once. The draw's whole
-- result (this row and every entry below) commits in one transaction, so a leader that dies
-- mid-draw leaves nothing and the next one draws again, from the same seed and the same closed
-- list, to the same order. `published_at`: the result is in Redis (codes and waitlist), a step
-- a new leader repeats until it is done; `settled_at`: the sale is over and every entry's final
-- status is written.
CREATE TABLE lottery_draws (
    activity_id BIGINT NOT NULL,
    item_id BIGINT NOT NULL,
    registrants INTEGER NOT NULL,
    winners INTEGER NOT NULL,
    drawn_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ,
    settled_at TIMESTAMPTZ,
    PRIMARY KEY (activity_id, item_id)
);

-- Every registrant of a drawn item, in the draw's order (`rank` from 1; the first `winners`
-- won, the rest waited in this order). A code handed out later (the waitlist moving) is written
-- here as the leader hands it out; the final status when the sale is settled. `rank` is absent
-- for a buyer revoked before the draw (he took no part in it).
CREATE TABLE lottery_entries (
    activity_id BIGINT NOT NULL,
    item_id BIGINT NOT NULL,
    user_id BIGINT NOT NULL,
    rank INTEGER,
    status TEXT NOT NULL CHECK (status IN ('registered', 'won', 'waitlisted', 'bought',
                                           'expired', 'lost', 'revoked')),
    code TEXT,
    code_valid_from TIMESTAMPTZ,
    code_expires_at TIMESTAMPTZ,
    code_units INTEGER,
    revoked_reason TEXT,
    PRIMARY KEY (activity_id, item_id, user_id)
);
CREATE INDEX lottery_entries_by_rank ON lottery_entries (activity_id, item_id, rank);
