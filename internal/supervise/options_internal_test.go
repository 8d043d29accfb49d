package supervise

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
)

// TestTooSmallTTLRefused: with the default grace, margin and renewal
// interval, two renewals fit before the stop signal only for a TTL above
// 750ms (2·TTL/3 < TTL − TTL/5 − 100ms). Every TTL up to there is refused
// with the same explanation, also those of a few nanoseconds, whose
// fractions once rounded down to zero and passed; the next ones are
// accepted.
func TestTooSmallTTLRefused(t *testing.T) {
	var ttls []time.Duration
	for d := time.Duration(1); d <= 2000; d++ {
		ttls = append(ttls, d)
	}
	for d := 2 * time.Microsecond; d <= 750*time.Millisecond; d = d*3/2 + 1 {
		ttls = append(ttls, d)
	}
	ttls = append(ttls, 600*time.Millisecond, 750*time.Millisecond)
	for _, ttl := range ttls {
		_, err := check(Options{Lock: "l", Command: []string{"true"}, TTL: ttl})
		if err == nil || !errors.Is(err, coord.ErrInvalid) || !strings.Contains(err.Error(), "leaves no room for two renewal attempts") {
			t.Fatalf("--ttl %v: %v; want it refused: no room for two renewal attempts", ttl, err)
		}
		if strings.Contains(err.Error(), "(every 0s)") {
			t.Fatalf("--ttl %v: %v", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{751 * time.Millisecond, time.Second, 15 * time.Second, coord.MaxTTL} {
		p, err := check(Options{Lock: "l", Command: []string{"true"}, TTL: ttl})
		if err != nil {
			t.Fatalf("--ttl %v refused: %v", ttl, err)
		}
		if 3*p.interval < ttl || 5*p.grace < min(ttl, 25*time.Second) {
			t.Fatalf("--ttl %v: interval %v, grace %v", ttl, p.interval, p.grace)
		}
	}
}
