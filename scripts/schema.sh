#!/usr/bin/env bash
# scripts/schema.sh: rewrite docs/schema.sql, the current schema in one place.
#
# Why: each migration says why something changed; docs/schema.sql says what there is now (which
# body of a function is live, which indexes a table has). The test `schema::` compares the file
# with what the migrations make on a fresh database and fails when they differ; this runs the
# same test in its writing mode. Needs PostgreSQL (scripts/setup.sh) and pg_dump.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$SECKILL_ROOT"
SECKILL_WRITE_SCHEMA=1 cargo test --workspace --test api -- --exact \
  schema::the_checked_in_schema_is_what_the_migrations_make
log "wrote docs/schema.sql ($(wc -l <docs/schema.sql) lines)"
