-- Whether an audited flip is in force. Never edited once landed.
--
-- A flip's audit row used to be written in a transaction that committed only after etcd had
-- answered: a crash between the two left the flip in force and unaudited. Now the row commits
-- first, as `pending`, and becomes `applied` (with the value it replaced and its revision)
-- once etcd took the write, or `failed` when etcd refused it or could not be reached. A row
-- left `pending` is a flip whose outcome its instance never learnt: etcd's value and revision
-- say whether it landed. Rows written before this migration, and changes written straight
-- into etcd (recorded once seen), are `applied`.
ALTER TABLE switch_audit ADD COLUMN state TEXT NOT NULL DEFAULT 'applied'
    CHECK (state IN ('pending', 'applied', 'failed'));
