-- A version of an item's holders: a number that moves whenever the item may have gained a
-- holder in PostgreSQL. Never edited once landed.
--
-- Every instance that refuses an item from memory (sold out, its activity ended or its entry
-- closed) keeps the item's holders, so that a winner's replay still reaches his answer. It
-- read every holding of the item again each second: for an item that ends with hundreds of
-- thousands of holders, a read of all of them per second per instance, while the storm it
-- refuses goes on. With this version it reads one row per second, and the holdings only when
-- the version moved.
--
-- A holding gains units only in a transaction that allocates them: both pre-order writers
-- (the batch of Redis reservations and `allocate_preorders`) raise `allocated` in the same
-- statement that writes the holdings. So the trigger moves the version whenever `allocated`
-- grows, whoever raises it, and a reader that sees the same version twice saw no new holder
-- between (a release only lowers `allocated`: a former holder is still in the set, which only
-- sends him to his stored answer). It fires once per item per batch, not once per order.
ALTER TABLE activity_items ADD COLUMN holders_version BIGINT NOT NULL DEFAULT 0;

CREATE FUNCTION next_holders_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.holders_version := OLD.holders_version + 1;
    RETURN NEW;
END;
$$;

CREATE TRIGGER activity_items_holders_version
    BEFORE UPDATE OF allocated ON activity_items
    FOR EACH ROW WHEN (NEW.allocated > OLD.allocated)
    EXECUTE FUNCTION next_holders_version();
