package supervise

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// locationVars say where the coordinator is; Options.Location replaces them.
var locationVars = []string{"FENCE_STATE_DIR", "FENCE_ENDPOINTS", "FENCE_PREFIX", "FENCE_POSTGRES", "FENCE_POSTGRES_SCHEMA"}

// leaseVars are set by fence for the command; inherited values are replaced
// (FENCE_DEADLINE is removed when no deadline applies).
var leaseVars = []string{"FENCE_LOCK", "FENCE_TOKEN", "FENCE_LEASE_ID", "FENCE_HOLDER", "FENCE_TTL", "FENCE_DEADLINE", "FENCE_SLOT"}

// pgPassword is libpq's password variable: a credential of fence's own when
// its coordinator is PostgreSQL, so then not passed on either.
const pgPassword = "PGPASSWORD"

// scrubEnv removes credentials, fence's own variables and the coordinator's
// location from env, then adds location.
func scrubEnv(env []string, location map[string]string) []string {
	drop := slices.Concat(locationVars, leaseVars)
	if _, ok := location["FENCE_POSTGRES"]; ok {
		drop = append(drop, pgPassword)
	}
	out := make([]string, 0, len(env)+len(location))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(drop, k) || isCredential(k) || isSetVar(k) {
			continue
		}
		out = append(out, kv)
	}
	return setEnv(out, location)
}

// isCredential catches the credentials never passed on to the command:
// FENCE_PASSWORD, FENCE_PASSWORD_FILE and any FENCE_ variable that names a
// password or a secret.
func isCredential(k string) bool {
	if !strings.HasPrefix(k, "FENCE_") {
		return false
	}
	return strings.Contains(k, "PASSWORD") || strings.Contains(k, "SECRET")
}

// setEnv sets the variables of vars in env, replacing earlier values, in a
// stable order.
func setEnv(env []string, vars map[string]string) []string {
	if len(vars) == 0 {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := vars[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if isCredential(k) {
			continue
		}
		out = append(out, k+"="+vars[k])
	}
	return out
}

// leaseEnv is what the command learns about its lease.
func leaseEnv(l coord.Lease) map[string]string {
	return map[string]string{
		"FENCE_LOCK":     l.Name,
		"FENCE_TOKEN":    strconv.FormatUint(l.Token, 10),
		"FENCE_LEASE_ID": l.ID,
		"FENCE_HOLDER":   l.Holder,
		"FENCE_TTL":      strconv.FormatFloat(l.TTL.Seconds(), 'f', -1, 64),
		// The slot of a semaphore (--slots), 0 for a lock.
		"FENCE_SLOT": strconv.Itoa(l.Slot),
	}
}

// deadlineVar is FENCE_DEADLINE: the deadline on the wall clock.
func deadlineVar(deadline clock.Boot) string {
	return time.Now().Add(deadline.Sub(clock.Now())).Format(time.RFC3339)
}
