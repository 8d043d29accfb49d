package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord/postgres"
	"github.com/fence-dev/fence/pkg/guard/sqlguard/pgtest"
)

func TestReplicationRisk(t *testing.T) {
	for _, c := range []struct {
		standbys      int
		names, commit string
		warn          string // a part of the warning; "" for none
	}{
		{0, "", "on", ""},  // no standby: nothing to fail over to
		{0, "", "off", ""}, // the setting alone is no failover risk
		{1, "", "on", "synchronous_standby_names is empty"}, // a standby, asynchronous
		{2, "  ", "on", "2 standby(s)"},                     // blank is empty
		{1, "s1", "off", "synchronous_commit is off"},       // named, but commits do not wait
		{1, "FIRST 1 (s1)", "local", "synchronous_commit is local"},
		{1, "s1", "LOCAL", "synchronous_commit is local"},
		{1, "s1", "on", ""},
		{1, "ANY 1 (s1, s2)", "remote_apply", ""},
		{1, "*", "remote_write", ""},
	} {
		got := postgres.ReplicationRisk("postgres db:5432/app schema fence", c.standbys, c.names, c.commit)
		if (c.warn == "") != (got == "") || !strings.Contains(got, c.warn) {
			t.Errorf("standbys %d, synchronous_standby_names %q, synchronous_commit %q: got %q, want one containing %q",
				c.standbys, c.names, c.commit, got, c.warn)
		}
		if got != "" && (strings.Contains(got, "\n") || !strings.Contains(got, "failover can lose the last tokens")) {
			t.Errorf("warning %q: want one line saying what a failover loses", got)
		}
	}
}

// TestReplicationWarningNoStandby: a real server without standbys gets no
// warning (the question itself works for an ordinary role's session).
func TestReplicationWarningNoStandby(t *testing.T) {
	srv := pgtest.Start(t)
	c, err := open(srv.URL(srv.CreateDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if w := c.(interface{ ReplicationWarning(context.Context) string }).ReplicationWarning(ctx); w != "" {
		t.Errorf("ReplicationWarning on a server without standbys: %q, want none", w)
	}
}
