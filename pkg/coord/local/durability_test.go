package local

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/atomicfile"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// TestGrantsSyncWhereNeeded: a grant that reserves a new block of tokens is
// always written with its fsync (and the directory's); the grants within
// the block, and the queue's changes, skip the state's fsync where a crash
// cannot lose their token: when the lock's reservation file was written
// under this boot (reserve.go; wherever the boot id can be read), or else
// on a file system that writes a renamed file's data ahead of the rename
// (atomicfile.RenameOrdered, as found for this directory); never with
// fsyncAlways. Tokens grow by one either way. It runs in the test's
// temporary directory and, where there is one, on /dev/shm (tmpfs: ordered).
func TestGrantsSyncWhereNeeded(t *testing.T) {
	dirs := []string{newDir(t)}
	if shm, err := os.MkdirTemp("/dev/shm", "fence-local-test-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs = append(dirs, filepath.Join(shm, "state"))
	}
	for i := 0; i < 2*len(dirs); i++ {
		always, dir := i%2 == 1, dirs[i/2]
		if always {
			dir += "-always"
		}
		var synced, ordered int
		replaceSynced = func(path, temp string, data []byte, syncDir bool, perm os.FileMode) (os.FileInfo, error) {
			synced++
			return atomicfile.WriteViaPerm(path, temp, data, syncDir, perm)
		}
		replaceOrdered = func(path, temp string, data []byte, perm os.FileMode) (os.FileInfo, error) {
			ordered++
			return atomicfile.ReplaceVia(path, temp, data, perm)
		}
		c, err := Open(dir, func(o *options) { o.fsyncAlways = always })
		if err != nil {
			t.Fatal(err)
		}
		ctx := tctx(t)
		var last uint64
		grant := func() *coord.Lease {
			t.Helper()
			l, err := c.Acquire(ctx, "job", coord.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if l.Token != last+1 {
				t.Fatalf("token %d after %d", l.Token, last)
			}
			last = l.Token
			return l
		}
		l := grant() // the first: a new block
		if synced != 1 || ordered != 0 {
			t.Fatalf("always=%v: the first grant made %d synced and %d unsynced replacements, want 1 and 0", always, synced, ordered)
		}
		if err := c.Release(ctx, "job", l.ID); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := c.Release(ctx, "job", grant().ID); err != nil {
				t.Fatal(err)
			}
		}
		wantOrdered, _ := atomicfile.RenameOrdered(c.locksDir)
		wantOrdered = (wantOrdered || clock.BootID() != "") && !always
		t.Logf("%s, always=%v: %d synced, %d unsynced replacements (file system ordered: %v)", dir, always, synced, ordered, wantOrdered)
		if wantOrdered && (synced != 1 || ordered != 5) || !wantOrdered && (synced != 6 || ordered != 0) {
			t.Fatalf("always=%v: grants within the block made %d synced and %d unsynced replacements; want %s",
				always, synced-1, ordered, map[bool]string{true: "0 and 5", false: "5 and 0"}[wantOrdered])
		}
		c.Close()
	}
	replaceSynced, replaceOrdered = atomicfile.WriteViaPerm, atomicfile.ReplaceVia
}
