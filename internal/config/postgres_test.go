package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestPostgresConn: what fence connects with, and what the command of
// fence run is told. The password of --password-file goes into the
// connection string, never into the location; a remote host with no
// sslmode gets verify-full, loopback and the unix socket keep theirs.
func TestPostgresConn(t *testing.T) {
	dir := cleanEnv(t)
	for _, k := range []string{"PGSSLMODE", "PGCONNECT_TIMEOUT", "PGPASSWORD"} {
		t.Setenv(k, "")
	}
	pw := writeFile(t, filepath.Join(dir, "pw"), "s3 'cret\n", 0o600)
	for _, tc := range []struct {
		args          []string
		conn, without []string // substrings of PostgresConn, and those not in it
		location      string
	}{
		{[]string{"--postgres", "host=db.example.com dbname=f", "--password-file", pw},
			[]string{"sslmode=verify-full", `password='s3 \'cret'`, "connect_timeout=5"}, nil,
			"host=db.example.com dbname=f"},
		{[]string{"--postgres", "postgres://fence@db.example.com/f", "--password-file", pw, "--dial-timeout", "1500ms"},
			[]string{"postgres://fence@db.example.com/f?", "password=s3+%27cret", "sslmode=verify-full", "connect_timeout=2"}, nil,
			"postgres://fence@db.example.com/f"},
		{[]string{"--postgres", "host=/run/postgresql dbname=f"},
			[]string{"host=/run/postgresql"}, []string{"sslmode", "password"}, "host=/run/postgresql dbname=f"},
		{[]string{"--postgres", "postgres://localhost/f?connect_timeout=9"},
			[]string{"connect_timeout=9"}, []string{"sslmode", "connect_timeout=5"}, "postgres://localhost/f?connect_timeout=9"},
		{[]string{"--postgres", "host=10.0.0.1 sslmode=require", "--insecure-transport"},
			[]string{"sslmode=require"}, []string{"verify-full"}, "host=10.0.0.1 sslmode=require"},
	} {
		c := mustLoad(t, tc.args...)
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		for _, s := range tc.conn {
			if !strings.Contains(c.PostgresConn(), s) {
				t.Errorf("%q: PostgresConn %q lacks %q", tc.args, c.PostgresConn(), s)
			}
		}
		for _, s := range tc.without {
			if strings.Contains(c.PostgresConn(), s) {
				t.Errorf("%q: PostgresConn %q has %q", tc.args, c.PostgresConn(), s)
			}
		}
		if got := c.PostgresLocation(); got != tc.location {
			t.Errorf("%q: PostgresLocation %q, want %q", tc.args, got, tc.location)
		}
	}
}

// TestPostgresLocationWithoutPassword: a password in the string (from the
// environment or a file) is not in the location nor in fence config.
func TestPostgresLocationWithoutPassword(t *testing.T) {
	cleanEnv(t)
	for _, s := range []string{
		"postgres://u:s3cret@localhost/f?sslmode=disable",
		"postgres://u@localhost/f?password=s3cret",
		"host=localhost password=s3cret dbname=f",
		"host=localhost password='s3cret x' dbname=f",
	} {
		t.Setenv(EnvName(KeyPostgres), s)
		c := mustLoad(t)
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if !strings.Contains(c.PostgresConn(), "s3cret") {
			t.Errorf("%q: PostgresConn %q lost the password", s, c.PostgresConn())
		}
		if strings.Contains(c.PostgresLocation(), "s3cret") || strings.Contains(c.PostgresLocation(), "password") {
			t.Errorf("%q: PostgresLocation %q", s, c.PostgresLocation())
		}
		for _, e := range c.Entries("", "") {
			if strings.Contains(e.Value, "s3cret") {
				t.Errorf("%q: fence config shows the password in %s: %q", s, e.Key, e.Value)
			}
		}
	}
}

// TestPostgresSchemaChecked: a schema the coordinator would refuse is
// refused where it is read, naming its source, whichever coordinator is
// used (fence postgres schema prints SQL for it without connecting).
func TestPostgresSchemaChecked(t *testing.T) {
	cleanEnv(t)
	if _, err := load(t, "--postgres-schema", ""); err == nil || !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), `--postgres-schema "": want 1 to 63 bytes`) {
		t.Errorf("--postgres-schema '': err = %v", err)
	}
	t.Setenv("FENCE_POSTGRES_SCHEMA", `a"b`)
	if _, err := load(t); err == nil || !strings.HasPrefix(err.Error(), `FENCE_POSTGRES_SCHEMA "a\"b": want`) {
		t.Errorf("FENCE_POSTGRES_SCHEMA a\"b: err = %v", err)
	}
	t.Setenv("FENCE_POSTGRES_SCHEMA", "ops")
	if c := mustLoad(t); c.PostgresSchema != "ops" {
		t.Errorf("schema = %q, want ops", c.PostgresSchema)
	}
}
