package local

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/sharedir"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
)

const (
	stateSuffix = ".json"
	lockSuffix  = ".lock"
	hashPrefix  = "=" // never produced by atomicfile.Escape
	maxFileName = 255

	// tempPrefix starts the name of a lock's temporary state file:
	// tempPrefix+base (at most 255 bytes, as base+stateSuffix is). '~' is
	// never in a base, so the name cannot be one that atomicfile.WritePerm
	// (os.CreateTemp) makes.
	tempPrefix = ".tmp~"
	// legacyTempPrefix starts the temporary files of fence versions that
	// wrote the state through atomicfile.WritePerm (random names).
	legacyTempPrefix = atomicfile.TempPrefix
)

// lockFiles names the files of one lock.
type lockFiles struct {
	name  string // lock name
	base  string // file name without suffix
	state string // path of the JSON state file
	lock  string // path of the flock file
	temp  string // path of the temporary file a state is written to
	share sharedir.Mode
}

func (c *coordinator) files(name string) lockFiles { return c.filesAt(name, fileBase(name)) }

// filesAt names the files of lock name stored under base (name may be "" for
// a hashed base read from a listing: it is then read from the state file).
func (c *coordinator) filesAt(name, base string) lockFiles {
	return lockFiles{
		name:  name,
		base:  base,
		state: filepath.Join(c.locksDir, base+stateSuffix),
		lock:  filepath.Join(c.locksDir, base+lockSuffix),
		temp:  filepath.Join(c.locksDir, tempPrefix+base),
		share: c.share,
	}
}

// fileBase is the escaped name (atomicfile.Escape: bytes other than
// [A-Za-z0-9._-], and a leading '.', become %XX), or "=<sha256>" when the
// escape is too long for a file name.
func fileBase(name string) string {
	return atomicfile.FileBase(name, maxFileName-len(stateSuffix), hashPrefix)
}

// stateFileBase returns the base of a state file's name, and whether the
// name is one of a state file (not a temporary or lock file).
func stateFileBase(fileName string) (string, bool) {
	base, ok := strings.CutSuffix(fileName, stateSuffix)
	return base, ok && !strings.HasPrefix(fileName, ".")
}

// nameFromBase returns the lock name for an escaped base; ok is false for a
// hashed base (the name is only in the file).
func nameFromBase(base string) (string, bool) {
	if strings.HasPrefix(base, hashPrefix) {
		return "", false
	}
	return atomicfile.Unescape(base) // ok is false for a string fileBase cannot have produced
}

// isTempName reports whether fileName is one of a temporary file: a lock's
// (tempPrefix) or one of an older fence (legacyTempPrefix).
func isTempName(fileName string) bool {
	return strings.HasPrefix(fileName, tempPrefix) || strings.HasPrefix(fileName, legacyTempPrefix)
}

// legacyTempAge is the age past which a temporary file of an older fence
// (random name, legacyTempPrefix) counts as left by a crash.
const legacyTempAge = time.Minute

// removeStaleTemp removes the temporary file fileName, found by a listing
// of locks/, when no writer can be using it: a lock's temporary file when
// its lock's flock is free (taken without waiting, so that a writer in
// progress, which holds it, keeps its file), a temporary file of an older
// fence when it is older than legacyTempAge. Listings (List, Watch) call it:
// a lock's leftover is otherwise replaced only by its next write (see
// store), and an older fence's never.
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
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil { // never EINTR: it does not wait
		return // a writer holds the lock (or it cannot be had): leave it
	}
	os.Remove(path)
}
