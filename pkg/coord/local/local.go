// Package local is fence's single-host coordinator (the default): leases on
// named locks shared by many processes of one host through a state directory,
// with no server. docs/architecture.md ("Local backend") gives the overview;
// this doc keeps the rules the code below enforces.
//
// # Layout
//
// The state directory (0700: openTop) holds locks/ (0700). Each lock has a
// JSON state file (0600: openFile) in locks/, named by fileBase; the real
// name is stored inside. Beside it, a lock file of the same base name is
// taken with flock(2) only for the short read-modify-write of the state;
// nothing is locked while a holder waits or runs its command. Readers
// (Inspect, List, Watch and waiters deciding whether to act) read the state
// without the lock. A state is written through the lock's temporary file
// (store; leftovers: removeStaleTemp). Only listings (List, Watch) read the
// whole of locks/: Open and the operations on one lock cost the same however
// many locks the directory holds.
//
// # Durability
//
// One rule, true on every file system: a token is durable before any
// command runs under it. Only the token must outlive a crash of the
// machine: holders and waiters are stored with the boot id, and a state
// from another boot has no live lease and no waiter.
//
//   - Issuing a token replaces the state (store) and then fsyncs locks/,
//     before the lease is returned. So tokens never go down and are never
//     issued twice. Tokens stop at coord.MaxToken: a lock that has issued
//     it refuses every Acquire (ErrUnavailable).
//   - Queueing and leaving the queue replace the state the same way,
//     without the directory fsync: a waiter is not worth keeping across a
//     crash, and the token it carries was made durable by its grant.
//   - A state of an older fence may carry a reserved token above its last
//     (state.Reserved): tokens go on above it.
//   - The rest of a holder's life (Renew, Release, AttachProcess) changes
//     only its lease record (record), overwritten in place with one pwrite
//     under the flock: no temporary file, no rename, no fsync. It needs
//     none: while the machine runs, every process sees the write at once
//     (the page cache); after a crash of the machine the boot id has
//     changed and the holder is void whatever its record says (a renewal
//     that did not reach the disk cannot keep a dead lease alive, a release
//     that did not reach it cannot bring one back). The bytes around the
//     record are unchanged, so a torn write can damage only the record,
//     which is then ignored with its holder (readState). Where the boot id
//     cannot be read (a state then outlives a reboot as it is), these
//     writes replace the state and fsync the directory, and so does every
//     grant.
//
// A state file that cannot be trusted (cut short, zeroed, empty: see
// openFile, parseState) fails closed, never read as a lower token nor as a
// new lock: an error wrapping coord.ErrUnavailable, and it is never reset.
//
// # Expiry and takeover
//
// A lease expires at its TTL on the boot clock (CLOCK_BOOTTIME). A lease
// attached to processes (AcquireOptions.Process, AttachProcess) records their
// PIDs with start times and the command's process group; once all of them are
// gone it may be taken over before its TTL. When a lease ended (TTL or
// revoke) while its command's process group still has members, the successor
// kills that group (SIGKILL) first when it may signal it, and waits for it to
// be gone; when it may not, it waits for the group to end, and the lock counts
// as busy meanwhile. The decision to kill is taken under the flock.
//
// # Waiting
//
// Waiters are served first come, first served: a waiter appends a ticket (its
// PID and start time) to the lock's queue and takes the lock when it is the
// first running waiter and the lock is free. Before its ticket is stored it
// watches its lock's state file (hub): every change of the state (a grant,
// a release, a renewal, the queue, a limit) wakes the lock's waiters, who
// read and judge the state and sleep again. The first two running waiters
// also follow the holder: they sleep until its expiry (a timer) or until
// one of its processes exits (a pidfd), so a holder's death is noticed at
// once. Every other waiter also follows the waiter ahead of it (a pidfd):
// there is no polling loop. Tickets of dead processes are dropped. A
// stopped waiter (SIGSTOP, Ctrl-Z) keeps its place but is passed over while
// it is stopped: a second waiter that finds the lock free looks again after
// a stall check (1s), taking it if the first has been stopped meanwhile.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fence-dev/fence/internal/sharedir"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
)

// coordinator is the local backend (Open). It is safe for concurrent use;
// any number of coordinators, in any number of processes of one host, may share a state
// directory.
type coordinator struct {
	dir      string
	locksDir string
	share    sharedir.Mode // how the state directory is shared (openTop)
	// stallCheck is how long a waiter gives the waiter ahead of it to take
	// a free lock before it checks whether that waiter was stopped (1s;
	// tests set less). This timer runs only while the lock is free and
	// another waiter should be taking it.
	stallCheck time.Duration

	mu  sync.Mutex
	hub *hub // started on first use, guarded by mu
	// life ends when the coordinator is closed (end).
	life context.Context
	end  context.CancelFunc
}

const (
	// killWait bounds the wait of an Acquire without Wait for the killed
	// group of an ended lease to be gone.
	killWait = 2 * time.Second
	// lockTimeout bounds the wait for a lock's flock.
	lockTimeout = 30 * time.Second
)

// DefaultDir is the default state directory: /var/lib/fence for root, else
// $XDG_STATE_HOME/fence, falling back to ~/.local/state/fence. It is ""
// when neither XDG_STATE_HOME nor a home directory is known.
func DefaultDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/fence"
	}
	if x := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "fence")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "state", "fence")
}

// Open opens (creating it, 0700, when missing) the state directory dir and
// returns the coordinator of its locks. Errors about the directory wrap
// coord.ErrUnavailable; an empty dir wraps coord.ErrInvalid.
func Open(dir string) (coord.Coordinator, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: no state directory (set --state-dir or HOME)", coord.ErrInvalid)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: state directory %q: %v", coord.ErrInvalid, dir, err)
	}
	share, err := openTop(dir)
	if err != nil {
		return nil, err
	}
	locks := filepath.Join(dir, "locks")
	if err := ensureDirs(share, locks); err != nil {
		return nil, err
	}
	life, end := context.WithCancel(context.Background())
	return &coordinator{dir: dir, locksDir: locks, share: share, stallCheck: time.Second, life: life, end: end}, nil
}

// Dir returns the state directory.
func (c *coordinator) Dir() string { return c.dir }

// StateFile returns the path of the state file of lock name (which may not
// exist yet), for messages and tools.
func (c *coordinator) StateFile(name string) string { return c.files(name).state }

// Describe says where the coordinator is: "local /var/lib/fence".
func (c *coordinator) Describe() string { return "local " + c.dir }

// Close releases the coordinator's resources; leases stay as they are.
// Waiting Acquire calls return an error wrapping coord.ErrUnavailable and
// Watch channels are closed.
func (c *coordinator) Close() error {
	c.mu.Lock()
	c.end() // subscribe refuses to start a hub from now on
	h := c.hub
	c.hub = nil
	c.mu.Unlock()
	if h != nil {
		h.release()
	}
	return nil
}

var errClosed = fmt.Errorf("%w: coordinator is closed", coord.ErrUnavailable)

func (c *coordinator) checkOpen() error {
	if c.life.Err() != nil {
		return errClosed
	}
	return nil
}

// subscribe subscribes to the changes of the file at path, seen by the
// inotify watches of the paths watch (hub.subscribe), on the change
// notifier of locks/, started on first use.
func (c *coordinator) subscribe(path string, watch ...string) (*subscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	if c.hub == nil {
		c.hub = acquireHub(c.locksDir)
	}
	return c.hub.subscribe(path, watch...), nil
}

// openTop checks (creating it, 0700, when missing) the state directory
// itself and decides how it is shared: by one user or by a group (the rules
// are package internal/sharedir's). A directory of the user's own that is
// open to group or others, and not shared with a group, is tightened to
// 0700.
func openTop(path string) (sharedir.Mode, error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return sharedir.Mode{}, unavailable("cannot create state directory %s: %v", path, err)
		}
	}
	m, err := sharedir.OfDir(path) // refuses a symbolic link and a non-directory
	if err == nil && !m.Group {
		var fi os.FileInfo
		if fi, err = os.Lstat(path); err == nil {
			err = m.CheckDir(path, fi)
		}
	}
	switch {
	case errors.Is(err, sharedir.ErrRefused):
		return m, unavailable("%v", err)
	case err != nil:
		return m, unavailable("state directory %s: %v", path, err)
	}
	return m, nil
}

// ensureDirs checks (creating them when missing) directories of the tree
// below the state directory, each in the one before; a new one's entry is
// made durable (its parent is fsynced).
func ensureDirs(share sharedir.Mode, dirs ...string) error {
	for _, d := range dirs {
		created, err := share.EnsureDir(d, false)
		if err != nil {
			return unavailable("%v", err)
		}
		if created {
			if err := atomicfile.SyncDir(filepath.Dir(d)); err != nil {
				return unavailable("state directory %s: %v", filepath.Dir(d), err)
			}
		}
	}
	return nil
}

// unavailable is an error about the state tree: a file or directory that
// cannot be read, written or trusted. It wraps coord.ErrUnavailable but
// does not say "coordinator unavailable": the message names the file and
// the cause, which is what the reader can act on. A permission error among
// args is wrapped too, as an *fs.PathError naming the last absolute path
// before it, so that the CLI can say how to repair the file
// (sharedir.Explain).
func unavailable(format string, args ...any) error {
	e := &stateError{msg: fmt.Sprintf(format, args...)}
	path := ""
	for _, a := range args {
		switch v := a.(type) {
		case string:
			if filepath.IsAbs(v) {
				path = v
			}
		case error:
			var pe *fs.PathError
			switch {
			case !errors.Is(v, fs.ErrPermission):
			case errors.As(v, &pe) || path == "":
				e.cause = v
			default:
				e.cause = &fs.PathError{Op: "use", Path: path, Err: v}
			}
		}
	}
	return e
}

type stateError struct {
	msg   string
	cause error // a permission error, or nil
}

func (e *stateError) Error() string        { return e.msg }
func (e *stateError) Unwrap() error        { return e.cause }
func (e *stateError) Is(target error) bool { return target == coord.ErrUnavailable }

// ready fails a call on a closed coordinator, or whose ctx has ended.
func (c *coordinator) ready(ctx context.Context) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	return ctx.Err()
}
