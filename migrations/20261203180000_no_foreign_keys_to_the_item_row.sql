-- Pre-orders and buyer holdings stop checking their (activity, item) against
-- `activity_items` with a foreign key. Never edited once landed.
--
-- The referenced row is the hottest row of a sale: the pre-order batches move `allocated` on
-- it and the create-order consumer moves `sold`. A foreign key checked every inserted order
-- and every holding against it, one lookup per row and a key-share lock on it, so that row
-- carried a multixact of every batch in flight as well. Replayed on a benchmark's database (a
-- batch of 25 pre-orders, as the buy path writes it), the statement took 1.1-1.2 ms without
-- the two keys against 1.4-1.5 ms with them.
--
-- The writers keep the key themselves: the buy path writes orders and holdings only for an
-- item of the activity it read from the catalogue, and the catalogue refuses to replace an
-- activity's items once it has started or has an order. What the cascade of the holdings'
-- key did, the rehearsal's clean-up does by name.
ALTER TABLE orders DROP CONSTRAINT orders_activity_id_item_id_fkey;
ALTER TABLE buyer_holdings DROP CONSTRAINT buyer_holdings_activity_id_item_id_fkey;
