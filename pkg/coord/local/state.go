package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/proc"

	"github.com/fence-dev/fence/internal/atomicfile"
)

// formatVersion is the version of the state file format. It changes only for
// incompatible changes; a reader refuses a state of a later version. Data
// added by later versions of format 1 goes under "ext", which writers that do
// not know it keep as it is.
const formatVersion = 1

// maxStateSize bounds a state file; a larger one is refused as corrupt.
const maxStateSize = 16 << 20

// state is the content of a lock's state file.
type state struct {
	Version   int    `json:"version"`
	Name      string `json:"name"`
	LastToken uint64 `json:"last_token"`
	// BootID is the boot of the boot-clock readings and process IDs below.
	BootID string   `json:"boot_id,omitempty"`
	Holder *holder  `json:"holder,omitempty"`
	Queue  []ticket `json:"queue,omitempty"`
	// Ext holds data of later versions of the format, kept as read.
	Ext map[string]json.RawMessage `json:"ext,omitempty"`
}

// holder is the current (or last, until replaced) lease.
type holder struct {
	LeaseID    string        `json:"lease_id"`
	Holder     string        `json:"holder"`
	Token      uint64        `json:"token"`
	TTL        time.Duration `json:"ttl_ns"`
	AcquiredAt time.Time     `json:"acquired_at"`
	ExpiresAt  clock.Boot    `json:"expires_at"` // boot clock, ns
	Revoked    bool          `json:"revoked,omitempty"`
	// PIDs are the supervising processes the lease is attached to.
	PIDs []proc.ID `json:"pids,omitempty"`
	// Group is the command's process group: PID is the PGID, Start the
	// leader's start time (0 when the leader was already gone).
	Group *proc.ID `json:"pgid,omitempty"`
	// PIDNS is the PID namespace of PIDs and Group.
	PIDNS string `json:"pidns,omitempty"`
}

func (h *holder) attached() bool { return len(h.PIDs) > 0 || h.Group != nil }

// ours reports whether the holder's processes can be checked here: they
// were recorded in our PID namespace. Elsewhere the lease is judged by its
// TTL alone, and its processes are never signalled.
func (h *holder) ours() bool { return h.PIDNS == proc.PIDNamespace() }

// ticket is a waiter's place in the queue.
type ticket struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	Start  uint64 `json:"start"`
	Holder string `json:"holder,omitempty"`
	PIDNS  string `json:"pidns,omitempty"`
}

func (t ticket) proc() proc.ID { return proc.ID{PID: t.PID, Start: t.Start} }

// corrupt is the fail-closed error for a state file that cannot be trusted.
func corrupt(f lockFiles, what string, args ...any) error {
	if f.name == "" {
		return unavailable("state file %s %s; fence never resets it (its token would be lost): repair or remove it by hand",
			f.state, fmt.Sprintf(what, args...))
	}
	return unavailable("lock %q: state file %s %s; fence never resets it (its token would be lost): repair or remove it by hand",
		f.name, f.state, fmt.Sprintf(what, args...))
}

// checkFile refuses a file of the state tree that is not a regular file
// owned by the effective user with mode 0600.
func checkFile(f lockFiles, path string, fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return unavailable("lock %q: %s: %v", f.name, path, err)
	}
	what := "state file"
	if path == f.lock {
		what = "lock file"
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return unavailable("lock %q: %s %s is not a regular file", f.name, what, path)
	case int(st.Uid) != os.Geteuid():
		return unavailable("lock %q: %s %s is owned by uid %d, not by the current user (uid %d)", f.name, what, path, st.Uid, os.Geteuid())
	case st.Mode&0o777 != 0o600:
		return unavailable("lock %q: %s %s has mode %04o, want 0600", f.name, what, path, st.Mode&0o777)
	}
	return nil
}

// load reads a lock's state without taking its lock (states are replaced
// whole). A missing file is a lock never used: a fresh state. Anything that
// cannot be trusted fails closed.
func load(f lockFiles) (*state, error) {
	fd, err := unix.Open(f.state, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return &state{Version: formatVersion, Name: f.name, BootID: clock.BootID()}, nil
	case errors.Is(err, unix.ELOOP):
		return nil, corrupt(f, "is a symbolic link")
	case err != nil:
		return nil, unavailable("lock %q: cannot read state file %s: %v", f.name, f.state, err)
	}
	file := os.NewFile(uintptr(fd), f.state)
	defer file.Close()
	if err := checkFile(f, f.state, fd); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(file, maxStateSize+1))
	if err != nil {
		return nil, unavailable("lock %q: cannot read state file %s: %v", f.name, f.state, err)
	}
	return parseState(f, b)
}

func parseState(f lockFiles, b []byte) (*state, error) {
	if len(b) == 0 {
		return nil, corrupt(f, "is empty (truncated)")
	}
	if len(b) > maxStateSize {
		return nil, corrupt(f, "is larger than %d bytes", maxStateSize)
	}
	st := new(state)
	if err := json.Unmarshal(b, st); err != nil {
		return nil, corrupt(f, "is truncated or corrupt (%v)", err)
	}
	switch {
	case st.Version == 0:
		return nil, corrupt(f, "has no format version")
	case st.Version > formatVersion:
		return nil, unavailable("lock %q: state file %s was written by a newer fence (format %d; this fence reads format %d)",
			f.name, f.state, st.Version, formatVersion)
	case f.name != "" && st.Name != f.name:
		return nil, corrupt(f, "belongs to lock %q", st.Name)
	case f.name == "" && (coord.ValidateName(st.Name) != nil || fileBase(st.Name) != f.base):
		return nil, corrupt(f, "names lock %q, which does not match its file name", st.Name)
	}
	if h := st.Holder; h != nil {
		if h.Token == 0 || h.Token > st.LastToken || h.LeaseID == "" || h.TTL <= 0 {
			return nil, corrupt(f, "is inconsistent (holder token %d, last token %d)", h.Token, st.LastToken)
		}
	}
	for _, t := range st.Queue {
		if t.ID == "" || t.PID <= 0 {
			return nil, corrupt(f, "is inconsistent (a waiter without id or pid)")
		}
	}
	// Holders and waiters of another boot are gone; only the token stays.
	if id := clock.BootID(); st.BootID != id {
		st.BootID, st.Holder, st.Queue = id, nil, nil
	}
	return st, nil
}

// store writes st durably enough: the data is fsynced before the rename
// (a crash never leaves a truncated state); the directory is fsynced too
// when sync is set, which callers do whenever a token was issued, so that a
// token, once handed out, survives a power loss.
func (c *Coordinator) store(f lockFiles, st *state, sync bool) error {
	st.Version = formatVersion
	st.BootID = clock.BootID()
	b, err := json.Marshal(st)
	if err != nil {
		return unavailable("lock %q: encode state: %v", f.name, err)
	}
	b = append(b, '\n')
	if _, err := atomicfile.Write(f.state, b, false); err != nil { // mode 0600
		return unavailable("lock %q: write state: %v", f.name, err)
	}
	if sync {
		if err := atomicfile.SyncDir(c.locksDir); err != nil {
			return unavailable("lock %q: sync state directory: %v", f.name, err)
		}
	}
	return nil
}

// lockState takes the lock's flock for a read-modify-write. The returned
// function releases it.
func (c *Coordinator) lockState(ctx context.Context, f lockFiles) (func(), error) {
	fd, err := unix.Open(f.lock, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, unavailable("lock %q: lock file %s is a symbolic link", f.name, f.lock)
	case err != nil:
		return nil, unavailable("lock %q: open lock file %s: %v", f.name, f.lock, err)
	}
	if err := checkFile(f, f.lock, fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	unlock := func() { unix.Close(fd) } // closing the last descriptor drops the flock
	err = flockEINTR(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return unlock, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		unix.Close(fd)
		return nil, unavailable("lock %q: flock %s: %v", f.name, f.lock, err)
	}
	// Contended: block in a goroutine so that ctx and the timeout are obeyed.
	res := make(chan error, 1)
	go func() { res <- flockEINTR(fd, unix.LOCK_EX) }()
	timer := time.NewTimer(c.opts.lockTimeout)
	defer timer.Stop()
	abandon := func() {
		go func() { <-res; unix.Close(fd) }()
	}
	select {
	case err := <-res:
		if err != nil {
			unix.Close(fd)
			return nil, unavailable("lock %q: flock %s: %v", f.name, f.lock, err)
		}
		return unlock, nil
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	case <-timer.C:
		abandon()
		return nil, unavailable("lock %q: lock file %s has been locked for over %v (a process stopped in the middle of an update?)",
			f.name, f.lock, c.opts.lockTimeout)
	case <-c.closed:
		abandon()
		return nil, errClosed
	}
}

func flockEINTR(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// update runs fn on the lock's state under its flock and stores the state
// when fn asks for it (write), fsyncing the directory when sync is set.
func (c *Coordinator) update(ctx context.Context, f lockFiles, fn func(st *state) (write, sync bool, err error)) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	unlock, err := c.lockState(ctx, f)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := load(f)
	if err != nil {
		return err
	}
	write, sync, err := fn(st)
	if write {
		if serr := c.store(f, st, sync); serr != nil {
			return serr
		}
	}
	return err
}

// The tickets of waiting Acquire calls in this process. A ticket of this
// process that is not here was left by a call whose removal failed: it is
// dropped like a dead process's.
var liveTickets sync.Map // ticket ID -> struct{}
