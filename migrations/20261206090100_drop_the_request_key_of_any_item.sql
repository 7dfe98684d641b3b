-- The request key of a pre-order is (buyer, request id, activity, item), by the unique index
-- `orders_request_per_item` the migration before built concurrently: `allocate_preorders`
-- finds a member's earlier order by that key, and the old (buyer, request id) key, which made
-- a request id reused for another item a "duplicate" answered with the first item's order, is
-- dropped. Never edited once landed.
--
-- `allocate_preorders` (the 13-argument one) is as in 20261203130000, its members, verdicts
-- and locking as documented in 20261201200000 and 20261202170000, but for the two places that
-- look for a member's request id in use: a `duplicate` is now the same buyer's request id
-- for the same activity and item, in `orders` or earlier in the batch.
--
-- Dropping a key is a change to the catalogue only (no rewrite, no scan), but it takes the
-- table's ACCESS EXCLUSIVE lock, and a statement waiting for that lock makes every later
-- statement on `orders` wait behind it: during a sale, a long transaction on the table would
-- stall the sale for as long as it ran. So the lock is asked for with a short timeout, and
-- asked again after a pause while someone else holds the table; the key is dropped last, so
-- that the lock is held only for the commit that follows.
--
-- A version older than this one names the old key in its pre-order batch's ON CONFLICT: once
-- the key is gone, that statement fails, and such an instance writes each batch through
-- `allocate_preorders` instead (this one, so by the new key), member by member and with a
-- warning each time. Its answers stay right but its batches cost more: roll instances over
-- to this version between sales.
CREATE OR REPLACE FUNCTION allocate_preorders(
    ids UUID[], activities BIGINT[], items BIGINT[], users BIGINT[], quantities INTEGER[],
    amounts BIGINT[], request_ids TEXT[], outbox_states TEXT[], limits INTEGER[],
    seat_members INTEGER[], seat_codes TEXT[], topic TEXT, outbox_ids UUID[])
RETURNS TABLE (member INTEGER, verdict TEXT, existing UUID)
LANGUAGE plpgsql AS $$
DECLARE
    n CONSTANT INTEGER := cardinality(ids);
    verdicts TEXT[] := array_fill('written'::TEXT, ARRAY[n]);
    existings UUID[] := array_fill(NULL::UUID, ARRAY[n]);
    seated CONSTANT BOOLEAN := cardinality(seat_members) > 0;
    -- held[i]: the units member i's buyer holds of its item once member i is decided.
    held INTEGER[] := array_fill(0, ARRAY[n]);
    sale RECORD;
    seen RECORD;
    buyer RECORD;
    i INTEGER;
    units_left INTEGER;
    holding INTEGER;
    wanted TEXT[] := '{}';
    taken TEXT[];
    seats_found INTEGER;
    seats_free INTEGER;
BEGIN
    -- Members whose order id, or whose request id for their item, is in use already: they are
    -- not allocated.
    FOR seen IN
        SELECT m.i, o.id, o.id = m.id AND o.request_id <> m.request_id AS voided
        FROM unnest(ids, users, request_ids, activities, items)
             WITH ORDINALITY AS m (id, user_id, request_id, activity_id, item_id, i)
        JOIN orders o ON o.id = m.id
                      OR (o.user_id = m.user_id AND o.request_id = m.request_id
                          AND o.activity_id = m.activity_id AND o.item_id = m.item_id)
    LOOP
        IF seen.voided THEN
            verdicts[seen.i] := 'voided';
        ELSIF verdicts[seen.i] = 'written' THEN
            verdicts[seen.i] := 'duplicate';
            existings[seen.i] := seen.id;
        END IF;
    END LOOP;
    FOR seen IN
        SELECT d.i FROM (
            SELECT m.i, row_number() OVER (PARTITION BY m.user_id, m.request_id, m.activity_id, m.item_id
                                           ORDER BY m.i) AS k
            FROM unnest(users, request_ids, activities, items)
                 WITH ORDINALITY AS m (user_id, request_id, activity_id, item_id, i)) d
        WHERE d.k > 1
    LOOP
        IF verdicts[seen.i] = 'written' THEN
            verdicts[seen.i] := 'duplicate';
        END IF;
    END LOOP;

    -- Item by item in one global order, so concurrent batches cannot deadlock; each item row
    -- is locked before its seats and holdings, as in every transaction that moves them.
    FOR sale IN
        SELECT DISTINCT s.activity_id, s.item_id
        FROM unnest(activities, items) AS s (activity_id, item_id)
        ORDER BY s.activity_id, s.item_id
    LOOP
        SELECT ai.total_stock - ai.allocated INTO units_left
        FROM activity_items ai
        WHERE ai.activity_id = sale.activity_id AND ai.item_id = sale.item_id
        FOR UPDATE;
        taken := '{}';
        -- The sale's members in batch order, each with the units its buyer held before the
        -- batch (one probe of the holding's key per member, a subquery so that no estimate
        -- of a table growing during the sale can turn it into a scan of the item's holdings)
        -- and the member before it in this batch with the same buyer, if any.
        FOR buyer IN
            SELECT u.i,
                   COALESCE((SELECT h.units FROM buyer_holdings h
                             WHERE h.activity_id = sale.activity_id AND h.item_id = sale.item_id
                               AND h.user_id = u.user_id), 0) AS stored,
                   lag(u.i) OVER (PARTITION BY u.user_id ORDER BY u.i) AS before
            FROM unnest(activities, items, users) WITH ORDINALITY AS u (activity_id, item_id, user_id, i)
            WHERE u.activity_id = sale.activity_id AND u.item_id = sale.item_id
            ORDER BY u.i
        LOOP
            i := buyer.i;
            holding := CASE WHEN buyer.before IS NULL THEN buyer.stored ELSE held[buyer.before] END;
            held[i] := holding;
            CONTINUE WHEN verdicts[i] <> 'written';
            IF seated THEN
                wanted := ARRAY(SELECT c.code FROM unnest(seat_members, seat_codes) AS c (m, code)
                                WHERE c.m = i);
            END IF;
            IF holding >= limits[i] THEN
                verdicts[i] := 'already_purchased';
            ELSIF holding + quantities[i] > limits[i] THEN
                verdicts[i] := 'limit_exceeded';
            ELSIF cardinality(wanted) > 0 THEN
                SELECT count(*), count(*) FILTER (WHERE s.order_id IS NULL) INTO seats_found, seats_free
                FROM (SELECT seats.order_id FROM seats
                      WHERE seats.activity_id = sale.activity_id AND seats.seat_code = ANY (wanted)
                      FOR UPDATE) s;
                IF seats_found < cardinality(wanted) THEN
                    verdicts[i] := 'unknown_seat';
                ELSIF seats_free < cardinality(wanted) OR taken && wanted THEN
                    verdicts[i] := 'sold_out';
                END IF;
            ELSIF units_left <= 0 THEN
                verdicts[i] := 'sold_out';
            ELSIF units_left < quantities[i] THEN
                verdicts[i] := 'not_enough';
            END IF;
            IF verdicts[i] = 'written' THEN
                units_left := units_left - quantities[i];
                held[i] := holding + quantities[i];
                taken := taken || wanted;
            END IF;
        END LOOP;
    END LOOP;

    INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status, request_id,
                        outbox_event_id)
    SELECT m.id, m.activity_id, m.item_id, m.user_id, m.quantity, m.amount_cents, 'PRE_CREATED', m.request_id,
           m.outbox_id
    FROM unnest(ids, activities, items, users, quantities, amounts, request_ids, outbox_ids)
         WITH ORDINALITY AS m (id, activity_id, item_id, user_id, quantity, amount_cents, request_id, outbox_id, i)
    WHERE verdicts[m.i] = 'written';
    -- One row per outbox id, its payload the create-order message of its written members.
    INSERT INTO outbox (event_id, topic, status, payload)
    SELECT m.outbox_id, allocate_preorders.topic, m.outbox_state, jsonb_build_object('orders',
           jsonb_agg(jsonb_build_object('order_id', m.id, 'activity_id', m.activity_id,
               'item_id', m.item_id, 'user_id', m.user_id, 'quantity', m.quantity,
               'amount_cents', m.amount_cents) ORDER BY m.i))
    FROM unnest(ids, activities, items, users, quantities, amounts, outbox_states, outbox_ids)
         WITH ORDINALITY AS m (id, activity_id, item_id, user_id, quantity, amount_cents, outbox_state, outbox_id, i)
    WHERE verdicts[m.i] = 'written'
    GROUP BY m.outbox_id, m.outbox_state
    ORDER BY min(m.i);
    UPDATE seats s SET order_id = ids[c.m]
    FROM unnest(seat_members, seat_codes) AS c (m, code)
    WHERE verdicts[c.m] = 'written' AND s.activity_id = activities[c.m] AND s.seat_code = c.code;
    UPDATE activity_items ai SET allocated = ai.allocated + b.units
    FROM (SELECT m.activity_id, m.item_id, SUM(m.quantity)::INTEGER AS units
          FROM unnest(activities, items, quantities) WITH ORDINALITY AS m (activity_id, item_id, quantity, i)
          WHERE verdicts[m.i] = 'written'
          GROUP BY m.activity_id, m.item_id) b
    WHERE ai.activity_id = b.activity_id AND ai.item_id = b.item_id;
    INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
    SELECT m.activity_id, m.item_id, m.user_id, SUM(m.quantity)::INTEGER, MAX(m.per_user_limit)
    FROM unnest(activities, items, users, quantities, limits)
         WITH ORDINALITY AS m (activity_id, item_id, user_id, quantity, per_user_limit, i)
    WHERE verdicts[m.i] = 'written'
    GROUP BY m.activity_id, m.item_id, m.user_id
    ORDER BY m.activity_id, m.item_id, m.user_id
    ON CONFLICT (activity_id, item_id, user_id)
    DO UPDATE SET units = buyer_holdings.units + EXCLUDED.units,
                  per_user_limit = EXCLUDED.per_user_limit;

    RETURN QUERY SELECT g.i, verdicts[g.i], existings[g.i] FROM generate_series(1, n) AS g (i);
END
$$;

DO $$
DECLARE
    attempts INTEGER := 0;
BEGIN
    IF NOT COALESCE((SELECT i.indisvalid FROM pg_index i
                     WHERE i.indexrelid = to_regclass('orders_request_per_item')), false) THEN
        RAISE EXCEPTION 'the unique index orders_request_per_item is missing or invalid: its concurrent build failed'
            USING HINT = 'run DROP INDEX CONCURRENTLY IF EXISTS orders_request_per_item; and '
                         'DELETE FROM _sqlx_migrations WHERE version = 20261206090000; then migrate again';
    END IF;
    PERFORM set_config('lock_timeout', '100ms', true);
    LOOP
        BEGIN
            ALTER TABLE orders DROP CONSTRAINT orders_user_id_request_id_key;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            -- About a minute in all; then the migration fails, and is tried again whole.
            attempts := attempts + 1;
            IF attempts >= 300 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.1);
        END;
    END LOOP;
END
$$;
