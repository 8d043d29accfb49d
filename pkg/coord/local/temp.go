package local

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/atomicfile"
)

// legacyTempAge is the age past which a temporary file of an older fence
// (random name, legacyTempPrefix) counts as left by a crash.
const legacyTempAge = time.Minute

// replaceState replaces the state file of f with data: the data is written
// to the lock's temporary file f.temp (0600), fsynced, and renamed over the
// state, so that a crash leaves the old or the new state, never a mix. The
// caller holds the lock's flock, and only the holder of the flock writes
// f.temp: a file found there is a leftover of a writer that died between
// creating it and renaming it, and is replaced (atomicfile.WriteVia). The
// directory is not fsynced.
//
// When durable is false (the write issues no token beyond the reserved
// block) the fsync is left out where a crash cannot lose the token: when
// reserved says that the lock's reservation file was written under the
// current boot (reserve.go: a state that a crash cut short is read, after
// the reboot, from the reservation), or when locks/ is on a file system
// that writes a renamed file's data ahead of the rename (a journaled ext4
// with its defaults, tmpfs: see atomicfile.RenameOrdered: a crash leaves
// the old or the new state all the same, and the token is safe in the
// reservation that the last durable write made). fsyncAlways (tests)
// keeps it.
func (c *Coordinator) replaceState(f lockFiles, data []byte, durable, reserved bool) error {
	if !durable && (reserved && !c.opts.fsyncAlways || c.renameOrdered()) {
		_, err := replaceOrdered(f.state, f.temp, data, f.shared().filePerm())
		return err
	}
	_, err := replaceSynced(f.state, f.temp, data, false, f.shared().filePerm())
	return err
}

// The two ways of replaceState (variables for the tests).
var (
	replaceOrdered = atomicfile.ReplaceVia
	replaceSynced  = atomicfile.WriteViaPerm
)

// renameOrdered reports atomicfile.RenameOrdered of locks/, found once.
func (c *Coordinator) renameOrdered() bool {
	c.orderedOnce.Do(func() {
		if c.opts.fsyncAlways {
			return
		}
		c.ordered, _ = atomicfile.RenameOrdered(c.locksDir)
	})
	return c.ordered
}

// removeStaleTemp removes the temporary file fileName, found by a listing
// of locks/, when no writer can be using it: a lock's temporary file when
// its lock's flock is free (taken without waiting, so that a writer in
// progress, which holds it, keeps its file), a temporary file of an older
// fence when it is older than legacyTempAge. Listings (List, Watch) call it:
// a lock's leftover is otherwise replaced only by its next write (see
// replaceState), and an older fence's never.
func (c *Coordinator) removeStaleTemp(fileName string) {
	path := filepath.Join(c.locksDir, fileName)
	base, ok := strings.CutPrefix(fileName, tempPrefix)
	if !ok {
		if fi, err := os.Lstat(path); err == nil && time.Since(fi.ModTime()) > legacyTempAge {
			os.Remove(path)
		}
		return
	}
	if base == "" || strings.HasPrefix(base, ".") {
		return // not a name tempPrefix+base can have
	}
	fd, err := unix.Open(filepath.Join(c.locksDir, base+lockSuffix), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return // no lock file: not a temporary file fence made
	}
	defer unix.Close(fd)
	if flockEINTR(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a writer holds the lock (or it cannot be had): leave it
	}
	os.Remove(path)
}
