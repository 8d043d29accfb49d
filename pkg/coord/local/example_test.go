package local_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/local"
)

func Example() {
	tmp, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(tmp)
	c, err := local.Open(filepath.Join(tmp, "state"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.Acquire(ctx, "jobs/backup", coord.AcquireOptions{TTL: 15 * time.Second, Wait: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token", l.Token)

	// Held: a second request that does not wait is refused.
	_, err = c.Acquire(ctx, "jobs/backup", coord.AcquireOptions{TTL: 15 * time.Second, Holder: "other", Wait: 0})
	fmt.Println(err != nil)

	_ = c.Release(ctx, l.Name, l.ID)
	l, _ = c.Acquire(ctx, "jobs/backup", coord.AcquireOptions{TTL: 15 * time.Second})
	fmt.Println("token", l.Token)
	_ = c.Release(ctx, l.Name, l.ID)
	// Output:
	// token 1
	// true
	// token 2
}
