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
-- it did not see yet will come with a larger one. Numbers of one sequence for every item,
-- cached by no session (CACHE 1, the default), so they are handed out in the order asked for.
--
-- The column starts empty: the holdings written before this file are read by a whole read,
-- which every instance makes first. A new holding takes its number from the column's default
-- (set apart from ADD COLUMN, which would otherwise write a number into every existing row,
-- rewriting the table under its lock), and a gain from a trigger, whoever writes it; a
-- release only lowers `units`, and keeps its number. The default, not an insert trigger: a
-- batch of 256 new holdings took 0.8 ms more with the default and the index of the next
-- migration than without either, and 1.5 ms more with a trigger instead (`BENCHMARKS.md`).
CREATE SEQUENCE buyer_holdings_gains;

ALTER TABLE buyer_holdings ADD COLUMN gained BIGINT;

ALTER TABLE buyer_holdings ALTER COLUMN gained SET DEFAULT nextval('buyer_holdings_gains');

CREATE FUNCTION number_holding_gain() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.gained := nextval('buyer_holdings_gains');
    RETURN NEW;
END;
$$;

CREATE TRIGGER buyer_holdings_gained
    BEFORE UPDATE OF units ON buyer_holdings
    FOR EACH ROW WHEN (NEW.units > OLD.units)
    EXECUTE FUNCTION number_holding_gain();
