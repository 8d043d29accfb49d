package details

import (
	"testing"

	"github.com/fence-dev/fence/pkg/history"
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
