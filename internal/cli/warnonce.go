package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A warning about the coordinator itself (an etcd version with a known
// lease-safety bug) is true of every command, and cron mails whatever a
// command prints: it is printed at most once per warnEvery on a host for
// each text (which names the members and their versions). warnedFile, in
// the user's cache directory, remembers when each was printed last. It is
// only a memory: when it cannot be read or written the warning is printed,
// and the command goes on.

// warnEvery is how often the same coordinator warning is printed.
const warnEvery = 24 * time.Hour

// warnedFile is where the times of the last coordinator warnings are kept:
// $XDG_CACHE_HOME/fence/warned (~/.cache/fence/warned); "" when there is
// no cache directory.
func warnedFile() string {
	dir, err := os.UserCacheDir()
	if err != nil || dir == "" {
		return ""
	}
	return filepath.Join(dir, "fence", "warned")
}

// warnDue reports whether warning is to be printed now, and when it is,
// records that it was (a failure to record it is ignored).
func warnDue(warning string, now time.Time) bool {
	path := warnedFile()
	if path == "" {
		return true
	}
	sum := sha256.Sum256([]byte(warning))
	key := hex.EncodeToString(sum[:8])
	data, _ := os.ReadFile(path)
	var keep []string
	for _, line := range strings.Split(string(data), "\n") {
		k, ts, ok := strings.Cut(line, " ")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if !ok || err != nil {
			continue
		}
		at := time.Unix(sec, 0)
		if now.Sub(at) >= warnEvery || at.After(now.Add(time.Minute)) { // old, or from a clock set back
			continue
		}
		if k == key {
			return false
		}
		keep = append(keep, line)
	}
	keep = append(keep, key+" "+strconv.FormatInt(now.Unix(), 10))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
		replaceFile(path, []byte(strings.Join(keep, "\n")+"\n"))
	}
	return true
}

// replaceFile replaces path with data through a temporary file (mode 0600)
// and a rename, so that a reader sees the old list or the new one, never a
// part. Errors are ignored: the list is only a memory.
func replaceFile(path string, data []byte) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil && cerr == nil && os.Rename(tmp.Name(), path) == nil {
		return
	}
	os.Remove(tmp.Name())
}
