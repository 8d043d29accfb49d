package local

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/internal/atomicfile"
)

// legacyTempAge is the age past which a temporary file of an older fence
// (random name, legacyTempPrefix) counts as left by a crash.
const legacyTempAge = time.Minute

// replaceState replaces the state file of f with data: the data is written
// to the lock's temporary file f.temp (0600), fsynced, and renamed over the
// state, so that a crash leaves the old or the new state, never a mix or a
// file cut short, on any file system. The caller holds the lock's flock,
// and only the holder of the flock writes f.temp: a file found there is a
// leftover of a writer that died between creating it and renaming it, and
// is replaced (atomicfile.WriteVia). The directory is not fsynced (store
// does, for a grant).
func replaceState(f lockFiles, data []byte) error {
	_, err := atomicfile.WriteViaPerm(f.state, f.temp, data, false, f.share.FilePerm())
	return err
}

// removeStaleTemp removes the temporary file fileName, found by a listing
// of locks/, when no writer can be using it: a lock's temporary file when
// its lock's flock is free (taken without waiting, so that a writer in
// progress, which holds it, keeps its file), a temporary file of an older
// fence when it is older than legacyTempAge. Listings (List, Watch) call it:
// a lock's leftover is otherwise replaced only by its next write (see
// replaceState), and an older fence's never.
func (c *coordinator) removeStaleTemp(fileName string) {
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
