package history

import (
	"context"
	"slices"
	"sync"

	"github.com/fence-dev/fence/pkg/coord"
)

// AcquireDeferred acquires as Acquire does, but returns as soon as the lease
// is granted: the acquisition is recorded (acquired, preceded by expired for
// a previous holder whose end is not on record) on a goroutine of its own,
// while the caller already uses the lease. `fence run` starts its command
// meanwhile, so that the history's read and write (an fsync, or two etcd
// requests) are not between the grant and the command's start.
//
// The events are never lost or reordered by the deferral: every later call
// of this Recorder about the same lock (Release, Revoke, Record, Append)
// first waits until the acquisition is recorded (or kept pending, as a
// failed write is), and so does Close. On a store that can put a write's
// fsync off (package localstore), "recorded" is written, visible to every
// process: the fsync follows on the same goroutine, and the release's own
// record, whose fsync covers the file's earlier writes, need not wait for
// it; Close does. A successor cannot take the lock
// before the lease is released, so it always finds the acquisition, and the
// release, on record.
func (r *recorder) AcquireDeferred(ctx context.Context, name string, opts coord.AcquireOptions) (*coord.Lease, error) {
	l, wait, err := r.acquire(ctx, name, opts)
	if err != nil {
		return l, err
	}
	done := r.inflight.start(name)
	r.syncing.Add(1)
	go func() {
		defer r.syncing.Done()
		fsync := r.recordAcquired(ctx, name, l, wait, opts.Slots, true)
		r.inflight.finish(name, done)
		if fsync != nil {
			fsync()
		}
	}()
	return l, nil
}

// inflight tracks the deferred records still being written, by lock.
type inflight struct {
	mu     sync.Mutex
	byLock map[string][]chan struct{}
}

// start registers a record of lock about to be written; finish(lock, ch)
// ends it.
func (f *inflight) start(lock string) chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byLock == nil {
		f.byLock = map[string][]chan struct{}{}
	}
	f.byLock[lock] = append(f.byLock[lock], ch)
	return ch
}

func (f *inflight) finish(lock string, ch chan struct{}) {
	f.mu.Lock()
	f.byLock[lock] = slices.DeleteFunc(f.byLock[lock], func(c chan struct{}) bool { return c == ch })
	if len(f.byLock[lock]) == 0 {
		delete(f.byLock, lock)
	}
	f.mu.Unlock()
	close(ch)
}

// wait returns once the records of lock started before the call are
// written. (Close waits for them all through the Recorder's syncing.)
func (f *inflight) wait(lock string) {
	f.mu.Lock()
	chs := slices.Clone(f.byLock[lock])
	f.mu.Unlock()
	for _, ch := range chs {
		<-ch
	}
}
