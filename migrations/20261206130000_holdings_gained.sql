-- When each holding last gained units, as a number that only grows: an instance refusing an
-- item from memory keeps its holders, and when the item's holders' version moved it reads
-- only the holdings that gained units since the largest number it saw, not every holding of
-- the item again (up to its whole stock, at each new holder). Never edited once landed.
--
-- Why the number of a holding written later is always larger, per item: a holding gains units
-- only in a transaction that has locked its item row first (both pre-order writers raise
-- `allocated` before they write the holdings), and holds that lock until it commits. So of two
-- transactions gaining holdings of one item, the later one takes its numbers after the earlier
-- one committed: a reader that saw a number saw every smaller one of the item, and whatever
-- it did not see yet will come with a larger one. Numbers of one sequence for every item.
--
-- The column starts empty: the holdings written before this file are read by a whole read,
-- which every instance makes first; a trigger numbers every new holding and every gain,
-- whoever writes it (a release only lowers `units`, and keeps its number).
CREATE SEQUENCE buyer_holdings_gains;

ALTER TABLE buyer_holdings ADD COLUMN gained BIGINT;

CREATE FUNCTION number_holding_gain() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.gained := nextval('buyer_holdings_gains');
    RETURN NEW;
END;
$$;

CREATE TRIGGER buyer_holdings_gained_insert
    BEFORE INSERT ON buyer_holdings
    FOR EACH ROW EXECUTE FUNCTION number_holding_gain();

CREATE TRIGGER buyer_holdings_gained_update
    BEFORE UPDATE OF units ON buyer_holdings
    FOR EACH ROW WHEN (NEW.units > OLD.units)
    EXECUTE FUNCTION number_holding_gain();
