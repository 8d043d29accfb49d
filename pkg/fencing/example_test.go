package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
	"github.com/fence-dev/fence/pkg/fencing"
)

// A Go worker holds a lease while it works: the lease is renewed in the
// background, the work stops when the context ends (the lease was lost or
// became unsafe), and every write carries the fencing token.
func Example() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := local.Open(dir) // or etcd.New(ctx, ...)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	h, err := fencing.Acquire(ctx, c, "reports/nightly",
		coord.AcquireOptions{TTL: 15 * time.Second, Wait: coord.WaitForever})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(ctx)

	work := func(ctx context.Context, token uint64) error {
		for step := 1; step <= 3; step++ {
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx) // the lease can no longer be trusted: stop
			}
			// Storage should refuse writes whose token is smaller than the
			// largest it has seen (fence guard put KEY --token N).
			fmt.Printf("step %d written with token %d\n", step, token)
		}
		return nil
	}
	if err := work(h.Context(), h.Token()); err != nil {
		var lost *fencing.LostError
		if errors.As(err, &lost) {
			log.Printf("stopped: %v", lost) // lost, unsafe or paused
		}
		return
	}
	fmt.Println("renewal failures so far:", h.Stats().Failures)
	// Output:
	// step 1 written with token 1
	// step 2 written with token 1
	// step 3 written with token 1
	// renewal failures so far: 0
}
