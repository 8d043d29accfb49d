package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"time"
)

// A warning about the coordinator itself (an etcd version with a known
// lease-safety bug) is true of every command, and cron mails whatever a
// command prints: it is printed at most once per warnEvery on a host for
// each text (which names the members and their versions). A marker file
// per text, in the user's cache directory, remembers by its modification
// time when it was printed last. It is only a memory: when it cannot be
// read or written the warning is printed, and the command goes on. Each
// time one is written, the markers of texts not printed for warnForget
// (a member upgraded, a cluster gone) and the single marker of older
// fences (warned) are removed.

const (
	// warnEvery is how often the same coordinator warning is printed.
	warnEvery = 24 * time.Hour
	// warnForget is how long the marker of a text no longer printed stays.
	warnForget = 7 * warnEvery
)

// warnDue reports whether warning is to be printed now, and when it is,
// records that it was in $XDG_CACHE_HOME/fence/warned-KEY
// (~/.cache/fence/warned-KEY), KEY a hash of the text (a failure to
// record it is ignored).
func warnDue(warning string, now time.Time) bool {
	dir, err := os.UserCacheDir()
	if err != nil || dir == "" {
		return true
	}
	sum := sha256.Sum256([]byte(warning))
	path := filepath.Join(dir, "fence", "warned-"+hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(path); err == nil {
		at := fi.ModTime()
		if now.Sub(at) < warnEvery && !at.After(now.Add(time.Minute)) { // not old, nor from a clock set back
			return false
		}
	}
	if os.MkdirAll(filepath.Dir(path), 0o700) == nil && os.WriteFile(path, nil, 0o600) == nil {
		_ = os.Chtimes(path, now, now)
		pruneWarned(filepath.Dir(path), now)
	}
	return true
}

// pruneWarned removes from dir the markers last written before now less
// warnForget, and the marker file of older fences.
func pruneWarned(dir string, now time.Time) {
	_ = os.Remove(filepath.Join(dir, "warned"))
	old, _ := filepath.Glob(filepath.Join(dir, "warned-*"))
	for _, p := range old {
		if fi, err := os.Lstat(p); err == nil && now.Sub(fi.ModTime()) > warnForget {
			_ = os.Remove(p)
		}
	}
}
