package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fence-dev/fence/pkg/coord"
)

// schemaVersion is the version of the tables this package uses.
const schemaVersion = 1

const schemaSQL = `CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.schema_version (version int PRIMARY KEY);
CREATE TABLE IF NOT EXISTS {s}.locks (
  name text COLLATE "C" PRIMARY KEY,
  last_token bigint NOT NULL DEFAULT 0 CHECK (last_token >= 0),
  slots int NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS {s}.leases (
  id bigint PRIMARY KEY,
  name text COLLATE "C" NOT NULL REFERENCES {s}.locks (name),
  holder text NOT NULL,
  token bigint NOT NULL,
  slot int NOT NULL,
  ttl_ms bigint NOT NULL,
  rvn bigint NOT NULL,
  acquired_at timestamptz NOT NULL DEFAULT now(),
  renewed_at timestamptz NOT NULL DEFAULT now(),
  supervised boolean NOT NULL DEFAULT false,
  process jsonb,
  stop_asked boolean NOT NULL DEFAULT false,
  UNIQUE (name, slot));
CREATE TABLE IF NOT EXISTS {s}.waiters (
  seq bigint PRIMARY KEY,
  name text COLLATE "C" NOT NULL,
  holder text NOT NULL,
  slots int NOT NULL,
  since timestamptz NOT NULL DEFAULT now());
CREATE SEQUENCE IF NOT EXISTS {s}.waiter_seq;
CREATE INDEX IF NOT EXISTS waiters_name ON {s}.waiters (name, seq);
CREATE TABLE IF NOT EXISTS {s}.limits (
  name text COLLATE "C" NOT NULL,
  prefix boolean NOT NULL,
  max int NOT NULL,
  reason text NOT NULL DEFAULT '',
  set_by text NOT NULL DEFAULT '',
  set_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (name, prefix));
CREATE TABLE IF NOT EXISTS {s}.completions (
  lock text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  holder text NOT NULL DEFAULT '',
  token bigint NOT NULL DEFAULT 0,
  started_ns bigint NOT NULL,
  finished_ns bigint NOT NULL,
  expires timestamptz NOT NULL,
  PRIMARY KEY (lock, key));
CREATE TABLE IF NOT EXISTS {s}.history (
  lock text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  at_ns bigint NOT NULL,
  event text NOT NULL,
  PRIMARY KEY (lock, seq));
CREATE TABLE IF NOT EXISTS {s}.history_heads (
  lock text COLLATE "C" PRIMARY KEY,
  seq bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.guards (
  key text COLLATE "C" PRIMARY KEY,
  value bytea,
  fence bigint NOT NULL DEFAULT 0,
  updated_at timestamptz);
-- grant_idle grants a lease in one round trip when the lock is idle: no
-- lease, no waiter (dead ones included), no limit, tokens left; else it
-- returns no row and fence takes the long way (package postgres, try).
CREATE OR REPLACE FUNCTION {s}.grant_idle(p_name text, p_holder text, p_slots int, p_ttl_ms bigint,
  p_id bigint, p_rvn bigint, p_process jsonb, p_chlock text, p_chwatch text)
RETURNS TABLE (g_token bigint, g_at timestamptz) LANGUAGE plpgsql AS $f$
DECLARE t bigint;
BEGIN
  INSERT INTO {s}.locks AS k (name) VALUES (p_name)
    ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING k.last_token INTO t;
  IF t >= 9223372036854775807
    OR EXISTS (SELECT FROM {s}.leases l WHERE l.name = p_name)
    OR EXISTS (SELECT FROM {s}.waiters w WHERE w.name = p_name)
    OR EXISTS (SELECT FROM {s}.limits m WHERE (NOT m.prefix AND m.name = p_name) OR (m.prefix AND starts_with(p_name, m.name))) THEN
    RETURN;
  END IF;
  UPDATE {s}.locks k SET last_token = t + 1, slots = p_slots WHERE k.name = p_name;
  INSERT INTO {s}.leases AS l (id, name, holder, token, slot, ttl_ms, rvn, supervised, process)
    VALUES (p_id, p_name, p_holder, t + 1, 0, p_ttl_ms, p_rvn, p_process IS NOT NULL, p_process)
    RETURNING l.token, l.acquired_at INTO g_token, g_at;
  PERFORM pg_notify(p_chlock, 'c'), pg_notify(p_chwatch, g_token::text || E'\n' || p_holder || E'\n' || p_name);
  RETURN NEXT;
END $f$;
INSERT INTO {s}.schema_version VALUES (1) ON CONFLICT DO NOTHING;
`

// SchemaSQL is the SQL that creates fence's tables in schema (an
// administrator runs it when fence's role may not: `fence postgres schema`).
func SchemaSQL(schema string) string {
	if schema == "" {
		schema = defaultSchema
	}
	return strings.ReplaceAll(schemaSQL, "{s}", pgx.Identifier{schema}.Sanitize())
}

// prepare refuses a standby and creates the schema when it is missing, in
// one transaction under an advisory lock, so that two first users do not
// race.
func (c *coordinator) prepare(ctx context.Context) error {
	var standby bool
	if err := c.pool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return c.MapErr(ctx, "connect", err)
	}
	if standby {
		return fmt.Errorf("%w: %s is a read-only standby (pg_is_in_recovery()): point fence at the primary", coord.ErrInvalid, c.where)
	}
	var v *int // nil: no version, or no table yet (an error)
	if c.pool.QueryRow(ctx, c.SQL("SELECT max(version) FROM {s}.schema_version")).Scan(&v) == nil && v != nil {
		if *v > schemaVersion {
			return fmt.Errorf("%w: schema %s is at version %d, newer than this fence knows (%d): upgrade fence", coord.ErrInvalid, c.schema, *v, schemaVersion)
		}
		if *v == schemaVersion {
			return nil
		}
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, 0)", c.class); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, c.SQL(schemaSQL))
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "25006") {
		return fmt.Errorf("%w: %s: the role may not create fence's tables (%s): have an administrator run the SQL that `fence postgres schema` prints", coord.ErrInvalid, c.where, pe.Message)
	}
	return c.MapErr(ctx, "create schema", err)
}
