package local

import (
	"encoding/json"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// The token reservation: <base>.tok beside the lock's state file.
//
// Every write that issues a token beyond the lock's reserved block reserves
// the next tokenBlock tokens (see the package doc, "Durability"). Besides
// the state, which it writes as before (fsynced, renamed, the directory
// fsynced), such a write puts the reservation in a small file of its own,
// fsynced and renamed the same way before the directory's fsync:
//
//	{"name":"<lock>","reserved_token":R,"boot_id":"<this boot>"}
//
// and the state records that boot as reserve_boot. While a state's
// reserve_boot is the current boot, the lock's other replacements of its
// state (the grants within the block, the queue's changes) skip their
// fsync on every file system: a crash can then leave the state file empty
// or cut short (ext4 without a journal, xfs and btrfs may put a renamed
// file's name on disk before its data), never the reservation. A crash
// also ends the boot, and a state file that does not parse is read, under
// a later boot whose reservation file names an earlier one, as what that
// crash left of the lock: free, with no waiter, its next token above R
// (every token issued was at most R). Under the boot that wrote the
// reservation no crash can have cut the state short: a state file that
// does not parse then fails closed, as does one without a reservation
// file, or with one that does not check out (see recovered).
//
// Fence versions before this file keep reserve_boot out of the states they
// write (they drop what they do not know), so their writes never let this
// version skip an fsync; this version's next reservation writes the file
// again. They never read it.

// reservation is the content of a lock's reservation file.
type reservation struct {
	Name     string `json:"name"`
	Reserved uint64 `json:"reserved_token"`
	BootID   string `json:"boot_id"`
}

// maxReserveSize bounds what is read of a reservation file.
const maxReserveSize = 4096

// writeReserve writes the reservation of st (its name, Reserved and boot):
// a temporary file (the lock's, which only the holder of its flock
// writes), fsynced, renamed. The caller holds the flock and fsyncs the
// directory after it.
func (c *Coordinator) writeReserve(f lockFiles, st *state) error {
	b, err := json.Marshal(reservation{Name: st.Name, Reserved: st.Reserved, BootID: st.BootID})
	if err != nil {
		return err
	}
	_, err = atomicfile.WriteViaPerm(f.rsv, f.temp, append(b, '\n'), false, f.shared().filePerm())
	return err
}

// reserveHolds reports whether a crash cannot lose what a replacement of
// st that issues no token beyond st.Reserved holds: the lock's reservation
// was written under the current boot (see above).
func reserveHolds(st *state) bool {
	return st.ReserveBoot != "" && st.ReserveBoot == clock.BootID()
}

// recovered returns the state a crash left of lock f, whose state file does
// not parse, when its reservation says that such a crash can have cut it
// short: a reservation file of f's lock, regular, the state tree's (as
// checkFile says), that parses, written under another boot than the
// current one. It is the lock free and without waiters, its last token
// the reserved one. Else it returns nil, and the state fails closed.
func recovered(f lockFiles) *state {
	boot := clock.BootID()
	if boot == "" {
		return nil
	}
	fd, err := unix.Open(f.rsv, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	size, err := checkFile(f, f.rsv, fd)
	if err != nil || size <= 0 || size > maxReserveSize {
		return nil
	}
	b, err := readAll(f, fd, size)
	if err != nil || int64(len(b)) != size {
		return nil
	}
	var r reservation
	if err := json.Unmarshal(b, &r); err != nil || r.BootID == "" || r.BootID == boot ||
		r.Reserved == 0 || r.Reserved > coord.MaxToken {
		return nil
	}
	switch {
	case f.name != "" && r.Name != f.name:
		return nil
	case f.name == "" && (coord.ValidateName(r.Name) != nil || fileBase(r.Name) != f.base):
		return nil
	}
	return &state{Version: formatVersion, Name: r.Name, LastToken: r.Reserved, Reserved: r.Reserved, BootID: boot}
}
