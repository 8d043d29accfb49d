package etcdproc

import (
	"context"
	"runtime"
	"time"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// etcd 3.4 refuses to start on architectures other than amd64 without this.
func archEnv() string { return runtime.GOARCH }
