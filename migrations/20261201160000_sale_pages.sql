-- Static sale pages (docs/buyer-api.md#the-sale-page): which publication of an activity's
-- page is current. The rendered files live in the site directory (`[sale_page] dir`); this
-- row is what every instance compares its loaded copy with, so a publish from another
-- instance or the command line is picked up, and a restart knows what to load.
-- Never edited once landed.

-- One row per published activity. `version` is 1 at the first publish and grows by one at
-- every publish after it (taken under the row's lock, so two publishes never share one).
CREATE TABLE sale_pages (
    activity_id   BIGINT PRIMARY KEY REFERENCES activities (id) ON DELETE CASCADE,
    version       BIGINT NOT NULL CHECK (version >= 1),
    published_by  TEXT NOT NULL,
    published_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
