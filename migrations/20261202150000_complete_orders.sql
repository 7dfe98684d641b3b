-- The create-order consumer's common case in one call: a batch of create-order events is
-- recorded as processed, its orders still `PRE_CREATED` become `UNPAID` (price snapshot, pay
-- deadline) and `sold` moves on their items, in one statement and so in one round trip. The
-- item rows are the hot rows of a sale (the pre-order writer moves `allocated` on them): they
-- are updated last and committed with the call, so they are locked for microseconds, never
-- across a wait for the client's next statement.
--
-- When the stock no longer covers every order of the batch (`sold` would pass `total_stock`
-- on an item), nothing is written: the call fails with SQLSTATE 'SK001', and the consumer
-- decides the batch order by order in a transaction of its own instead. Never edited once
-- landed.
--
-- One row per order completed now, and one per event that was processed before (`completed`
-- false, the rest NULL). An event whose order is not `PRE_CREATED` (completed, voided) is
-- recorded as processed and returns nothing.
CREATE FUNCTION complete_created_orders(consumer_name TEXT, event_ids UUID[])
RETURNS TABLE (event_id UUID, completed BOOLEAN, pay_timeout_s INTEGER, lag_s FLOAT8)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    fresh UUID[];
    items_short BIGINT;
    done_ids UUID[];
    done_timeouts INTEGER[];
    done_lags FLOAT8[];
BEGIN
    WITH recorded AS (
        INSERT INTO processed_events (consumer, event_id)
        SELECT consumer_name, e.id FROM UNNEST(event_ids) AS e (id)
        ON CONFLICT DO NOTHING
        RETURNING processed_events.event_id
    )
    SELECT COALESCE(array_agg(recorded.event_id), '{}') INTO fresh FROM recorded;

    -- A hashed set difference: a batch may carry thousands of events.
    RETURN QUERY
    SELECT e.id, FALSE, NULL::INTEGER, NULL::FLOAT8
    FROM (SELECT UNNEST(event_ids) EXCEPT SELECT UNNEST(fresh)) AS e (id);

    IF cardinality(fresh) = 0 THEN
        RETURN;
    END IF;

    -- The orders first, the item rows last (in key order, so two calls lock shared item
    -- rows in one order).
    WITH done AS (
        UPDATE orders o SET status = 'UNPAID', amount_cents = ai.price_cents * o.quantity,
               pay_deadline = now() + make_interval(secs => a.pay_timeout_s), updated_at = now()
        FROM activity_items ai, activities a
        WHERE o.id = ANY (fresh) AND o.status = 'PRE_CREATED'
          AND ai.activity_id = o.activity_id AND ai.item_id = o.item_id AND a.id = o.activity_id
        RETURNING o.id, o.activity_id, o.item_id, o.quantity, a.pay_timeout_s,
                  EXTRACT(EPOCH FROM clock_timestamp() - o.created_at)::FLOAT8 AS lag_s
    ), units AS (
        SELECT d.activity_id, d.item_id, SUM(d.quantity)::INTEGER AS units
        FROM done d GROUP BY d.activity_id, d.item_id
    ), moved AS (
        UPDATE activity_items ai SET sold = ai.sold + u.units
        FROM (SELECT * FROM units ORDER BY activity_id, item_id) u
        WHERE ai.activity_id = u.activity_id AND ai.item_id = u.item_id
          AND ai.sold + u.units <= ai.total_stock
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM units) - (SELECT count(*) FROM moved),
           array_agg(d.id), array_agg(d.pay_timeout_s), array_agg(d.lag_s)
    INTO items_short, done_ids, done_timeouts, done_lags
    FROM done d;
    IF items_short > 0 THEN
        RAISE EXCEPTION 'the stock no longer covers every order of the batch'
            USING ERRCODE = 'SK001';
    END IF;

    RETURN QUERY
    SELECT d.id, TRUE, d.pay_timeout_s, d.lag_s
    FROM UNNEST(done_ids, done_timeouts, done_lags) AS d (id, pay_timeout_s, lag_s)
    WHERE d.id IS NOT NULL;
END;
$$;
