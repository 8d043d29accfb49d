package details

import (
	"cmp"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/tui/internal/store"
)

// TestDescribeOnce: the timeline says which --once key ran to success, and
// which run found it done; and who froze, limited or thawed the lock, and why.
func TestDescribeOnce(t *testing.T) {
	for ev, want := range map[*history.Event]string{
		{Kind: history.Completed, Key: "2026-05-06T00:00:00Z", Holder: "web-1", Token: 7}: `key "2026-05-06T00:00:00Z": ran to success, token 7 by web-1`,
		{Kind: history.Skipped, Key: "k", Holder: "web-2", AcceptedToken: 7}:              `key "k": done already, nothing run (done under token 7), by web-2`,
		{Kind: history.Frozen, Holder: "alice@ops", Reason: "INC-7"}:                      `frozen by alice@ops: INC-7`,
		{Kind: history.Limited, Holder: "bob@ops", Count: 1}:                              `limited to 1 by bob@ops`,
		{Kind: history.Thawed, Holder: "alice@ops", Reason: "frozen by alice@ops"}:        `thawed by alice@ops: frozen by alice@ops`,
	} {
		if got := Describe(*ev); got != want {
			t.Errorf("Describe(%s) = %q, want %q", ev.Kind, got, want)
		}
	}
}

// TestDescribeEveryKind: what each kind of event says after who.
func TestDescribeEveryKind(t *testing.T) {
	for _, c := range []struct {
		ev   history.Event
		want string
	}{
		{history.Event{Kind: history.Acquired, Token: 7}, "token 7"},
		{history.Event{Kind: history.Acquired, Token: 7, Holder: "w", Wait: 1520 * time.Millisecond}, "token 7 by w, waited 1.5s"},
		{history.Event{Kind: history.Released, Token: 7, HeldFor: 61*time.Second + 300*time.Millisecond}, "token 7, held 1m1s"},
		{history.Event{Kind: history.RenewalFailed, Token: 7}, "token 7: 1 failed renewal"},
		{history.Event{Kind: history.RenewalFailed, Token: 7, Count: 3, Error: "timeout"}, "token 7: 3 failed renewals, last: timeout"},
		{history.Event{Kind: history.LeaseLost, Token: 7, Holder: "w"}, "token 7 by w: lease lost, command stopped"},
		{history.Event{Kind: history.DeadlineExceeded, Token: 7}, "token 7: deadline reached, command stopped"},
		{history.Event{Kind: history.Expired, Token: 7}, "token 7: expired, taken over"},
		{history.Event{Kind: history.Revoked, Token: 7}, "token 7: revoked"},
		{history.Event{Kind: history.Skipped, Key: "k"}, `key "k": done already, nothing run`},
		{history.Event{Kind: history.Frozen}, "frozen"},
		{history.Event{Kind: history.StaleRefused, Token: 3, AcceptedToken: 5}, "token 3 refused, 5 accepted"},
		{history.Event{Kind: history.StaleRefused, Token: 3, AcceptedToken: 5, Key: "k"}, `key "k": token 3 refused, 5 accepted`},
		{history.Event{Kind: history.ShardLost, Token: 7, Holder: "w"}, "token 7 by w"},
		{history.Event{Kind: history.Restarted, Token: 7, Error: "crash"}, "token 7: crash"},
	} {
		if got := Describe(c.ev); got != c.want {
			t.Errorf("Describe(%+v) = %q, want %q", c.ev, got, c.want)
		}
	}
}

// TestProcessText: the pids, and the process group when known.
func TestProcessText(t *testing.T) {
	for _, c := range []struct {
		p    coord.ProcessInfo
		want string
	}{
		{coord.ProcessInfo{PIDs: []int{42}}, "pids 42"},
		{coord.ProcessInfo{PIDs: []int{42, 43}, PGID: 42}, "pids 42,43, pgid 42"},
		{coord.ProcessInfo{}, "pids "},
	} {
		if got := processText(c.p); got != c.want {
			t.Errorf("processText(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// TestValues: the header's values for a lock not listed, a free one and
// a held one, as shown ("-" for a value not there). Was TestFieldsOf, with
// the same cases.
func TestValues(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := store.New()
	st.Apply(now,
		coord.Event{Info: coord.LockInfo{Name: "held", Held: true, Holder: "w", Token: 7, LastToken: 9, LeaseID: "l1",
			TTL: 30 * time.Second, TTLLeft: 20 * time.Second, AcquiredAt: now.Add(-90 * time.Second), Waiters: 2}},
		coord.Event{Info: coord.LockInfo{Name: "free", LastToken: 5}})
	st.SetCounts("held", 1, 2, now)
	m := New(nil, time.UTC)
	labels := []string{"holder", "token", "lease", "ttl", "acquired", "held for", "waiters", "renewals", "failures", "stale", "process"}
	dash := map[string]string{}
	for _, l := range labels {
		dash[l] = "-"
	}
	for _, c := range []struct {
		r    *store.Row
		want map[string]string
	}{
		{nil, dash},
		{st.Get("free"), map[string]string{"holder": "-", "token": "last 5", "lease": "-", "ttl": "-", "acquired": "-", "held for": "-", "waiters": "0",
			"renewals": "-", "failures": "-", "stale": "-", "process": "-"}},
		{st.Get("held"), map[string]string{"holder": "w", "token": "7 (last 9)", "lease": "l1", "ttl": "██░░ 20s of 30s", "acquired": "2026-01-02 03:02:35",
			"held for": "1m30s", "waiters": "2", "renewals": "0", "failures": "1", "stale": "2", "process": "-"}},
	} {
		v := m.values(c.r, now, 20)
		for _, l := range labels {
			if got := cmp.Or(v[l], "-"); got != c.want[l] {
				t.Errorf("values(%v)[%q] = %q, want %q", c.r != nil, l, got, c.want[l])
			}
		}
		if len(v) > len(labels) {
			t.Errorf("values(%v) = %v: more than the labels", c.r != nil, v)
		}
	}
}
