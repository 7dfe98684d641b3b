-- Units of an activity item held by pre-orders and orders that keep stock, whichever path
-- deducted them. The pre-order transaction moves it (one UPDATE per item per group-commit
-- batch), so PostgreSQL always knows every committed deduction, and the CHECK refuses a
-- batch that would oversell even if Redis drifted. With the deduction setting on `db`,
-- this column is the stock itself: batches are allocated against it under its row lock.
ALTER TABLE activity_items
    ADD COLUMN allocated INTEGER NOT NULL DEFAULT 0
        CHECK (allocated >= 0 AND allocated <= total_stock);
