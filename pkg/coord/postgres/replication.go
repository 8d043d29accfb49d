package postgres

import (
	"context"
	"fmt"
	"strings"
)

// ReplicationWarning asks the server whether it has standbys but commits
// without waiting for one, and returns one line saying what a failover can
// then lose ("" when it cannot: no standby, or synchronous replication to
// one; also "" when the question fails, which the command's own queries
// report). The session's default synchronous_commit is read: fence raises
// off only to local (durable), which waits for no standby either.
func (c *coordinator) ReplicationWarning(ctx context.Context) string {
	var standbys int
	var names, commit string
	err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_replication),
		current_setting('synchronous_standby_names'), (SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit')`).Scan(&standbys, &names, &commit)
	if err != nil {
		return ""
	}
	return replicationRisk(c.where, standbys, names, commit)
}

// replicationRisk is ReplicationWarning's decision: a server with standbys
// (rows of pg_stat_replication) whose commits do not wait for one
// (synchronous_standby_names empty, or synchronous_commit off or local)
// can fail over to a standby that lacks the last tokens granted, and the
// new primary may grant one of them again.
func replicationRisk(where string, standbys int, names, commit string) string {
	if standbys == 0 {
		return ""
	}
	var why string
	switch c := strings.ToLower(strings.TrimSpace(commit)); {
	case strings.TrimSpace(names) == "":
		why = "synchronous_standby_names is empty"
	case c == "off" || c == "local":
		why = "synchronous_commit is " + c
	default:
		return ""
	}
	return fmt.Sprintf("%s has %d standby(s) replicating asynchronously (%s): a failover can lose the last tokens granted, "+
		"and the new primary may grant one again; set synchronous_standby_names to a standby and synchronous_commit to on "+
		"or remote_apply (see the operations guide, Replication)", where, standbys, why)
}

// ShortReplicationRisk is the dashboard's short form of replicationRisk.
const ShortReplicationRisk = "async standbys: a failover can repeat tokens"
