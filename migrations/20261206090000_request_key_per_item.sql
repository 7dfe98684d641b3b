-- no-transaction
-- A buyer's request id is his per item: idempotency is keyed on (buyer, activity, item,
-- request id), so the same id sent for another item or activity is a new request with an
-- order of its own, never answered with the first item's order. This builds that key's
-- unique index beside the old (buyer, request id) one, which the next migration drops
-- (20261206090100). Never edited once landed.
--
-- CONCURRENTLY: a plain build holds a SHARE lock on `orders` while it reads the whole table,
-- which would stop every pre-order, completion and payment of a live sale meanwhile. A
-- concurrent build cannot run inside a transaction (the first line tells sqlx to run this
-- file without one), nor beside any other statement of the same query string, which
-- PostgreSQL runs as one implicit transaction: so it is alone in this file.
--
-- A build that fails half-way (the server stopped, a timeout) leaves an invalid index under
-- this name, which IF NOT EXISTS would then take for done: the next migration checks that
-- the index is valid before it drops the old key, and stops with what to do otherwise.
--
-- The columns begin like the old key's, so a lookup by the whole key probes one index entry.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS orders_request_per_item
    ON orders (user_id, request_id, activity_id, item_id);
