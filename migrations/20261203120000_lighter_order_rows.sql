-- What every order costs PostgreSQL besides its own rows, on the buy path's hot statements.
-- Never edited once landed.
--
-- Two foreign keys of `orders` repeated what its composite key to `activity_items` says
-- already: an activity item names an existing activity and an existing item, and neither can
-- go while the activity item is there (the item's key has no cascade; the activity's cascade
-- reaches the activity item, which the orders' composite key then protects). Each one ran a
-- lookup and took a row lock for every pre-order, thousands of times a second in a sale.
ALTER TABLE orders
    DROP CONSTRAINT orders_activity_id_fkey,
    DROP CONSTRAINT orders_item_id_fkey;

-- The history of status changes is written once per statement instead of once per row: the
-- create-order consumer moves hundreds of orders in one statement, and the row trigger ran
-- an INSERT for each. Every history row is taken from a row of the very statement that
-- updates it, so the foreign key back to `orders` only re-checked what the trigger reads;
-- an order is removed only with its history (a rehearsal's shadow removes the history first).
ALTER TABLE order_events DROP CONSTRAINT order_events_order_id_fkey;

DROP TRIGGER orders_status_history ON orders;
DROP FUNCTION record_order_event();

CREATE FUNCTION record_order_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_events (order_id, from_status, to_status)
    SELECT after.id, before.status, after.status
    FROM changed_before AS before JOIN changed_after AS after USING (id)
    WHERE before.status IS DISTINCT FROM after.status
    ORDER BY after.id;
    RETURN NULL;
END;
$$;

-- A trigger with transition tables takes no column list: it fires for every UPDATE of
-- `orders`, and the join keeps the rows whose status moved.
CREATE TRIGGER orders_status_history
    AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
    FOR EACH STATEMENT EXECUTE FUNCTION record_order_events();
