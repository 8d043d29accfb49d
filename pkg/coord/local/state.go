package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/internal/sharedir"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/internal/flock"
)

// formatVersion is the version of the state file format. It changes only for
// incompatible changes; a reader refuses a state of a later version. Data
// added by later versions of a format goes under "ext", which writers that
// do not know it keep as it is. Format 2 added the lease record ("lease")
// and the reserved token ("reserved_token"): a reader of format 1 would miss
// renewals and releases, and could issue a token again after a crash, so it
// must refuse them. Format 1 states are read as they are.
const formatVersion = 2

// maxStateSize bounds a state file; a larger one is refused as corrupt.
const maxStateSize = 16 << 20

// state is the content of a lock's state file.
type state struct {
	Version int `json:"version"`
	// Lease is the holder's lease record (record.go), present exactly when
	// there is a holder. It must stay the second member: it is overwritten
	// in place at recordOffset.
	Lease     string `json:"lease,omitempty"`
	Name      string `json:"name"`
	LastToken uint64 `json:"last_token"`
	// Reserved is the largest token that may have been issued. Fences
	// before this one reserved tokens in blocks, and a state they wrote may
	// read, after a crash, a LastToken below it: the next token then starts
	// above Reserved. This fence makes every grant durable and keeps
	// Reserved at least LastToken, as those fences check.
	Reserved uint64 `json:"reserved_token,omitempty"`
	// BootID is the boot of the boot-clock readings and process IDs below.
	BootID string   `json:"boot_id,omitempty"`
	Holder *holder  `json:"holder,omitempty"`
	Queue  []ticket `json:"queue,omitempty"`
	// Slots is the semaphore's slots (slots.go), 0 for a lock; Others its
	// holders besides Holder (the oldest), by token.
	Slots  int       `json:"slots,omitempty"`
	Others []*holder `json:"holders,omitempty"`
	// Ext holds data of later versions of the format, kept as read.
	Ext map[string]json.RawMessage `json:"ext,omitempty"`
}

// holder is the current (or last, until replaced) lease. Its expiry, group
// and release are kept up to date by the lease record; the fields here are
// as of the last time the whole state was written.
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
	// Slot is the holder's slot of a semaphore; StopAsked says that a stop
	// was asked of it (RequestStop; a lock's ask is ext.stop).
	Slot      int  `json:"slot,omitempty"`
	StopAsked bool `json:"stop_asked,omitempty"`
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
	// Since is when the waiter joined the queue (wall clock, for
	// display; absent from tickets of fences before it).
	Since time.Time `json:"since,omitzero"`
}

func (t ticket) proc() proc.ID { return proc.ID{PID: t.PID, Start: t.Start} }

// volatileOK reports whether writes that need not survive a reboot may skip
// fsync: only when the boot is known, so that a state read after a reboot
// is recognised as such (and its holders, waiters and lease records are
// ignored).
func volatileOK() bool { return bootID() != "" }

// corrupt is the fail-closed error for a state file that cannot be trusted.
func corrupt(f lockFiles, what string, args ...any) error {
	lock := ""
	if f.name != "" {
		lock = fmt.Sprintf("lock %q: ", f.name)
	}
	return unavailable("%sstate file %s %s; fence never resets it (its token would be lost): repair or remove it by hand",
		lock, f.state, fmt.Sprintf(what, args...))
}

// openFile opens a file of the state tree, named what in messages, with
// flags (besides O_NOFOLLOW and friends; O_CREAT makes it 0600), and
// refuses one that is a symbolic link, not a regular file with the tree's
// owner and mode (0600 and the effective user's, or 0660 and the group's in
// a shared state directory: openTop; a file of ours is given that mode), or
// larger than max bytes. A missing file is nil and no error.
func openFile(share sharedir.Mode, what, path string, flags int, max int64) (*os.File, int64, error) {
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	switch {
	case errors.Is(err, unix.ENOENT) && flags&unix.O_CREAT == 0:
		return nil, 0, nil
	case errors.Is(err, unix.ELOOP):
		return nil, 0, unavailable("%s %s is a symbolic link; repair or remove it by hand", what, path)
	case errors.Is(err, unix.EISDIR):
		return nil, 0, unavailable("%s %s is not a regular file", what, path)
	case err != nil:
		return nil, 0, unavailable("cannot open %s %s: %v", what, path, err)
	}
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err != nil {
		err = unavailable("%s %s: %v", what, path, err)
	} else if err = share.CheckFile(what, path, fd, &st); err != nil {
		err = unavailable("%v", err)
	} else if st.Size > max {
		err = unavailable("%s %s is larger than %d bytes; repair or remove it by hand", what, path, max)
	}
	if err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), path), st.Size, nil
}

// errTorn marks a lease record that does not check out: read in the middle
// of an overwrite (a reader without the lock reads again), or corrupt.
var errTorn = errors.New("torn lease record")

// load reads a lock's state without taking its lock (readState).
func load(f lockFiles) (*state, error) {
	st, _, _, err := readState(f, false)
	return st, err
}

// readState reads a lock's state. A missing file is a lock never used: a
// fresh state. Anything that cannot be trusted fails closed. States are
// replaced whole by rename, and the lease record is overwritten in place,
// so an open state file never changes size. Without the flock (locked
// false) a lease record that does not check out was caught in the middle
// of an overwrite: it is read again. Under the flock (locked) nothing
// overwrites the record, so such a record is corrupt; the state's bytes
// and the file, open for writing (nil when it does not exist yet), are
// returned too, and the caller closes it.
func readState(f lockFiles, locked bool) (*state, []byte, *os.File, error) {
	flags := unix.O_RDONLY
	if locked {
		flags = unix.O_RDWR
	}
	file, size, err := openFile(f.share, fmt.Sprintf("lock %q: state file", f.name), f.state, flags, maxStateSize)
	if err != nil {
		return nil, nil, nil, err
	}
	if file == nil {
		return &state{Version: formatVersion, Name: f.name, BootID: bootID()}, nil, nil, nil
	}
	for try := 0; ; try++ {
		b := make([]byte, size)
		n, err := file.ReadAt(b, 0)
		if err != nil && !errors.Is(err, io.EOF) { // EOF: truncated under us, parsed (and refused) as it is
			file.Close()
			return nil, nil, nil, unavailable("lock %q: cannot read state file %s: %v", f.name, f.state, err)
		}
		st, err := parseState(f, b[:n])
		if errors.Is(err, errTorn) && !locked && try < 50 {
			if try >= 3 {
				time.Sleep(100 * time.Microsecond)
			}
			continue
		}
		if errors.Is(err, errTorn) {
			err = corrupt(f, "has a lease record that does not check out")
		}
		if err != nil || !locked {
			file.Close()
			return st, nil, nil, err
		}
		return st, b[:n], file, nil
	}
}

// parseState parses and checks a state file's bytes (at most maxStateSize:
// openFile). The steps: decode (an empty or undecodable file fails
// closed), checkState (every rule a state must meet, or it fails closed),
// forBoot (a state of another boot keeps only its token), then the lease
// record.
func parseState(f lockFiles, b []byte) (*state, error) {
	st := new(state)
	if len(b) == 0 {
		return nil, corrupt(f, "is empty (truncated)")
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, corrupt(f, "is truncated or corrupt (%v)", err)
	}
	if err := checkState(f, st); err != nil {
		return nil, err
	}
	if err := forBoot(f, st, bootID()); err != nil {
		return nil, err
	}
	if err := applyRecord(f, st); err != nil {
		return nil, err
	}
	return st, nil
}

// checkState checks a decoded state, rule by rule; the first broken one is
// the error.
func checkState(f lockFiles, st *state) error {
	switch {
	// A known format version, and the lock's own name.
	case st.Version == 0:
		return corrupt(f, "has no format version")
	case st.Version > slotsVersion:
		return unavailable("lock %q: state file %s was written by a newer fence (format %d; this fence reads format %d)",
			f.name, f.state, st.Version, slotsVersion)
	case f.name != "" && st.Name != f.name:
		return corrupt(f, "belongs to lock %q", st.Name)
	case f.name == "" && (coord.ValidateName(st.Name) != nil || fileBase(st.Name) != f.base):
		return corrupt(f, "names lock %q, which does not match its file name", st.Name)
	// Tokens never pass coord.MaxToken, and every token up to
	// reserved_token was covered by a durable write: a state beyond the
	// ceiling (an older fence wrapped its counter) or with a reservation
	// below its last token is damaged, and its next token could repeat one.
	case st.LastToken > coord.MaxToken || st.Reserved > coord.MaxToken:
		return corrupt(f, "holds token %d, above the largest fencing token %d",
			max(st.LastToken, st.Reserved), uint64(coord.MaxToken))
	case st.Reserved != 0 && st.Reserved < st.LastToken:
		return corrupt(f, "is inconsistent (reserved token %d below last token %d)", st.Reserved, st.LastToken)
	// Slots within bounds, other holders only beside a holder.
	case st.Slots < 0 || st.Slots > coord.MaxSlots || len(st.Others) > 0 && st.Holder == nil:
		return corrupt(f, "is inconsistent (slots %d, %d other holder(s))", st.Slots, len(st.Others))
	}
	return checkMembers(f, st)
}

// checkMembers checks a decoded state's holders and waiters.
func checkMembers(f lockFiles, st *state) error {
	// Every holder has a token the lock issued, a lease id and a TTL.
	for _, h := range st.holders() {
		if h == nil || h.Token == 0 || h.Token > st.LastToken || h.LeaseID == "" || h.TTL <= 0 {
			var tok uint64
			if h != nil {
				tok = h.Token
			}
			return corrupt(f, "is inconsistent (holder token %d, last token %d)", tok, st.LastToken)
		}
	}
	// Waiters have an id and a PID.
	for _, t := range st.Queue {
		if t.ID == "" || t.PID <= 0 {
			return corrupt(f, "is inconsistent (a waiter without id or pid)")
		}
	}
	return nil
}

// forBoot makes st a state of boot: holders, waiters and lease records of
// another boot are gone; only the token stays, and it goes on above every
// token that may have been issued before the crash. Under the same boot a
// lease record needs a holder.
func forBoot(f lockFiles, st *state, boot string) error {
	if st.BootID != boot {
		st.BootID, st.Holder, st.Queue, st.Lease, st.Others = boot, nil, nil, "", nil
		st.LastToken = max(st.LastToken, st.Reserved)
		return nil
	}
	if st.Lease != "" && st.Holder == nil {
		return corrupt(f, "is inconsistent (a lease record without a holder)")
	}
	return nil
}

// applyRecord applies the lease record of st (as parsed) to its holder.
func applyRecord(f lockFiles, st *state) error {
	h := st.Holder
	if st.Lease == "" || h == nil {
		return nil
	}
	r, ok := decodeRecord(st.Lease)
	if !ok {
		return errTorn
	}
	if r.token != h.Token {
		return corrupt(f, "is inconsistent (lease record of token %d, holder token %d)", r.token, h.Token)
	}
	h.ExpiresAt = max(h.ExpiresAt, r.expires)
	if r.group != nil {
		h.Group = r.group
	}
	if r.released {
		st.Holder = nil
		st.promote()
	}
	return nil
}

// store replaces the state file with st through the lock's temporary file
// f.temp, fsyncing the directory too when sync is set (see the package doc:
// Durability). The caller holds the lock's flock, which makes it the one
// writer of f.temp that atomicfile.WriteViaPerm asks for.
func (c *coordinator) store(f lockFiles, st *state, sync bool) error {
	st.Version = formatVersion
	if st.slotted() {
		st.Version = slotsVersion
	}
	st.BootID = bootID()
	st.Reserved = max(st.Reserved, st.LastToken)
	st.Lease = ""
	if st.Holder != nil {
		st.Lease = recordOf(st.Holder).encode()
	}
	b, err := json.Marshal(st)
	if err != nil {
		return unavailable("lock %q: encode state: %v", f.name, err)
	}
	b = append(b, '\n')
	if _, err := atomicfile.WriteViaPerm(f.state, f.temp, b, false, f.share.FilePerm()); err != nil {
		return unavailable("lock %q: write state: %v", f.name, err)
	}
	if sync {
		if err := syncDir(c.locksDir); err != nil {
			return unavailable("lock %q: sync state directory: %v", f.name, err)
		}
	}
	return nil
}

// syncDir fsyncs a directory (a variable for the tests).
var syncDir = atomicfile.SyncDir

// hasRecord reports whether a state file's bytes have a lease record at
// recordOffset.
func hasRecord(raw []byte) bool {
	return len(raw) > recordOffset+recordLen && string(raw[:recordOffset]) == recordPrefix &&
		raw[recordOffset+recordLen] == '"'
}

// lockState takes the lock's flock for a read-modify-write, waiting at
// most lockTimeout, until ctx ends or the coordinator is closed (a closed
// one takes none). The returned function releases it.
func (c *coordinator) lockState(ctx context.Context, f lockFiles) (func(), error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	file, _, err := openFile(f.share, fmt.Sprintf("lock %q: lock file", f.name), f.lock, unix.O_RDWR|unix.O_CREAT, math.MaxInt64)
	if err != nil { // the check gives a new one of ours the tree's mode
		return nil, err
	}
	lctx, cancel := context.WithTimeoutCause(ctx, lockTimeout, errLockTimeout)
	defer cancel()
	defer context.AfterFunc(c.life, cancel)()
	if err := flock.Take(lctx, file); err != nil { // an uncontended flock is taken at once
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case c.life.Err() != nil:
			return nil, errClosed
		case context.Cause(lctx) == errLockTimeout:
			return nil, unavailable("lock %q: lock file %s has been locked for over %v (a process stopped in the middle of an update?)",
				f.name, f.lock, lockTimeout)
		}
		return nil, unavailable("lock %q: %v", f.name, err)
	}
	return func() { file.Close() }, nil // closing the last descriptor drops the flock
}

var errLockTimeout = errors.New("lock timeout")

// stateWrite is what an update writes.
type stateWrite int

const (
	// noChange: nothing is written.
	noChange stateWrite = iota
	// recordOnly: only a holder's expiry, group or release changed; the
	// lease record is overwritten in place, without fsync (or, where it
	// cannot be: a semaphore's state, one of format 1, the state is
	// replaced as for rewrite; without a boot id, as for durable).
	recordOnly
	// rewrite: the state file is replaced (data fsynced, renamed).
	rewrite
	// durable: as rewrite, and the directory is fsynced: a token was
	// issued.
	durable
)

// update runs fn on the lock's state under its flock and writes what fn
// reports. Every write raises an inotify event on locks/, which wakes the
// lock's waiters (see the package doc, "Waiting").
func (c *coordinator) update(ctx context.Context, f lockFiles, fn func(st *state) (stateWrite, error)) error {
	unlock, err := c.lockState(ctx, f)
	if err != nil {
		return err
	}
	defer unlock()
	st, raw, file, err := readState(f, true)
	if err != nil {
		return err
	}
	if file != nil {
		defer file.Close()
	}
	var token uint64
	if st.Holder != nil {
		token = st.Holder.Token
	}
	ch, err := fn(st)
	st.promote()
	if werr := c.write(f, st, raw, file, token, ch); werr != nil {
		return werr
	}
	return err
}

// write writes st as ch says; token is the holder's token as read.
func (c *coordinator) write(f lockFiles, st *state, raw []byte, file *os.File, token uint64, ch stateWrite) error {
	switch ch {
	case noChange:
		return nil
	case recordOnly:
		// Without a boot id a state outlives a reboot as it is: a release
		// must be durable not to bring its holder back.
		r := record{token: token, released: true}
		if h := st.Holder; h != nil {
			r = recordOf(h)
		}
		if !volatileOK() || st.slotted() || r.token == 0 || !hasRecord(raw) {
			return c.store(f, st, !volatileOK())
		}
		if _, err := file.WriteAt(r.append(nil), int64(recordOffset)); err != nil {
			return unavailable("lock %q: write state: %v", f.name, err)
		}
		return nil
	}
	return c.store(f, st, ch == durable)
}

// The tickets of waiting Acquire calls in this process. A ticket of this
// process that is not here was left by a call whose removal failed: it is
// dropped like a dead process's.
var liveTickets sync.Map // ticket ID -> struct{}
