-- When reconciliation last handed an outbox row back to the relay. Never edited once landed.
--
-- A pre-order answered 200 is never failed by a timer: while it stays `PRE_CREATED`, the
-- leader sends its event again and, once it has waited `fail_stuck_after_s` since the event
-- last reached RabbitMQ (`sent_at`), flags it for a person. A `sent` row whose order did not
-- complete is handed back once, not on every pass: each hand-back publishes the whole batch
-- again, and into a consumer backlog that would only make the backlog longer. This column
-- says whether it was. NULL: never handed back; rows written before it read as such.
ALTER TABLE outbox ADD COLUMN resent_at TIMESTAMPTZ;
