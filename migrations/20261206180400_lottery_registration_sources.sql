-- Where a drawn item's registrations came from, fixed by its draw (docs/lottery.md): ops judge
-- afterwards whether a few client addresses registered a large share of the buyers, when the
-- counts Redis kept are gone with the sale's keys. Never edited once landed.
--
-- Null for a draw made before addresses were counted. Nullable columns without a default: the
-- ALTER only changes the catalogue, whatever the table holds.
ALTER TABLE lottery_draws
    -- registrations made, revoked ones included
    ADD COLUMN registrations INTEGER,
    -- distinct addresses they came from
    ADD COLUMN addresses INTEGER,
    -- registrations made from the 100 addresses that made the most
    ADD COLUMN from_top_100 INTEGER,
    -- the busiest addresses, most first: [{"address": "...", "registrations": n}, ...]
    ADD COLUMN top_addresses JSONB;
