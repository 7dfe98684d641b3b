-- One outbox row per pre-order batch instead of one per pre-order. The group-commit writer
-- gives each member of a batch the id of its outbox row, one per activity of the batch (two
-- if the async switch changed mid-batch: `pending` and `recorded` members apart); the row's
-- payload is the create-order message the publisher sends, `{"orders": [...]}`, and each
-- order names its row in `outbox_event_id`. An outbox row costs PostgreSQL a heap tuple, two
-- index entries and, once published, an update that is never HOT: per batch it is paid once
-- for up to a few hundred buyers. Both ways of writing a batch do it: the plain insert of a
-- Redis-deducted batch (in the server) and `allocate_preorders`, below.
--
-- `outbox_event_id` is NULL for the orders written before this migration: their row's event
-- id is the order id, so `COALESCE(outbox_event_id, id)` finds every order's row. Adding a
-- nullable column without a default rewrites nothing.
--
-- `allocate_preorders` gains `outbox_ids`: it is the allocation of 20261201200000 (members,
-- verdicts and locking as documented there) with the orders and outbox rows written as
-- above. Its former signature stays for the instances of the previous release during a
-- rolling deploy, as a call of the new one with one row per order under the order's id (the
-- event id those instances mark sent). Never edited once landed.
ALTER TABLE orders ADD COLUMN outbox_event_id UUID;

CREATE FUNCTION allocate_preorders(
    ids UUID[], activities BIGINT[], items BIGINT[], users BIGINT[], quantities INTEGER[],
    amounts BIGINT[], request_ids TEXT[], outbox_states TEXT[], limits INTEGER[],
    seat_members INTEGER[], seat_codes TEXT[], topic TEXT, outbox_ids UUID[])
RETURNS TABLE (member INTEGER, verdict TEXT, existing UUID)
LANGUAGE plpgsql AS $$
DECLARE
    n CONSTANT INTEGER := cardinality(ids);
    verdicts TEXT[] := array_fill('written'::TEXT, ARRAY[n]);
    existings UUID[] := array_fill(NULL::UUID, ARRAY[n]);
    sale RECORD;
    seen RECORD;
    units_left INTEGER;
    held JSONB;
    holding INTEGER;
    wanted TEXT[];
    taken TEXT[];
    seats_found INTEGER;
    seats_free INTEGER;
BEGIN
    -- Members whose order id or request id is in use already: they are not allocated.
    FOR seen IN
        SELECT m.i, o.id, o.id = m.id AND o.request_id <> m.request_id AS voided
        FROM unnest(ids, users, request_ids) WITH ORDINALITY AS m (id, user_id, request_id, i)
        JOIN orders o ON o.id = m.id OR (o.user_id = m.user_id AND o.request_id = m.request_id)
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
            SELECT m.i, row_number() OVER (PARTITION BY m.user_id, m.request_id ORDER BY m.i) AS k
            FROM unnest(users, request_ids) WITH ORDINALITY AS m (user_id, request_id, i)) d
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
        SELECT COALESCE(jsonb_object_agg(h.user_id::TEXT, h.units), '{}'::JSONB) INTO held
        FROM buyer_holdings h
        WHERE h.activity_id = sale.activity_id AND h.item_id = sale.item_id
          AND h.user_id = ANY (users);
        taken := '{}';
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN activities[i] <> sale.activity_id OR items[i] <> sale.item_id
                OR verdicts[i] <> 'written';
            holding := COALESCE((held ->> users[i]::TEXT)::INTEGER, 0);
            wanted := ARRAY(SELECT c.code FROM unnest(seat_members, seat_codes) AS c (m, code)
                            WHERE c.m = i);
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
                held := held || jsonb_build_object(users[i]::TEXT, holding + quantities[i]);
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


CREATE OR REPLACE FUNCTION allocate_preorders(
    ids UUID[], activities BIGINT[], items BIGINT[], users BIGINT[], quantities INTEGER[],
    amounts BIGINT[], request_ids TEXT[], outbox_states TEXT[], limits INTEGER[],
    seat_members INTEGER[], seat_codes TEXT[], topic TEXT)
RETURNS TABLE (member INTEGER, verdict TEXT, existing UUID)
LANGUAGE sql AS $$
    SELECT * FROM allocate_preorders(ids, activities, items, users, quantities, amounts,
        request_ids, outbox_states, limits, seat_members, seat_codes, topic, ids);
$$;
