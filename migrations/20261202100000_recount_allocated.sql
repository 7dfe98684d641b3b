-- Recount `activity_items.allocated` from the orders that hold stock.
--
-- Why: 20261129100000_allocated_stock added the column as `DEFAULT 0` and counted none of
-- the orders already written, so a database upgraded from a version before it started
-- with `allocated` below the truth for every item that had orders: the pre-order batch's
-- allocation (and its CHECK) would hand those units out a second time, and a pre-warm would
-- load `total_stock - allocated` into Redis, too much. Only such an upgrade is affected; a
-- database created since has moved the column with every order, and this recount finds the
-- figures it already holds and writes nothing.
--
-- An order holds stock while `PRE_CREATED`, `UNPAID` or `PAID` (`OrderStatus::holds_stock`);
-- `CANCELLED` and `FAILED` orders gave their units back, and a `REFUND_PENDING` order is a
-- cancelled one whose money came late. The column is set to that sum, never added to, so the
-- recount can run any number of times with the same result. Items without such orders are
-- set to 0. An item the old version oversold trips the column's CHECK: the migration then
-- fails naming it, rather than hide the oversell.
UPDATE activity_items ai
SET allocated = held.units
FROM (
    SELECT i.activity_id, i.item_id, COALESCE(SUM(o.quantity), 0)::INTEGER AS units
    FROM activity_items i
    LEFT JOIN orders o
           ON o.activity_id = i.activity_id AND o.item_id = i.item_id
          AND o.status IN ('PRE_CREATED', 'UNPAID', 'PAID')
    GROUP BY i.activity_id, i.item_id
) held
WHERE ai.activity_id = held.activity_id
  AND ai.item_id = held.item_id
  AND ai.allocated <> held.units;
