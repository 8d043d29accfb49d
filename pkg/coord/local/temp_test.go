package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/coord"
)

// dirProbe watches a directory with inotify for what is done to the
// directory itself (not to its entries): opened (IN_OPEN) and listed
// (IN_ACCESS: getdents reports an access of the directory).
type dirProbe struct {
	t  *testing.T
	fd int
}

func newDirProbe(t *testing.T, dir string) *dirProbe {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
		t.Fatal(err)
	}
	return &dirProbe{t: t, fd: fd}
}

// take returns (and forgets) the events on the directory itself so far.
func (p *dirProbe) take() (opened, listed int) {
	p.t.Helper()
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(p.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return opened, listed
		}
		if err != nil {
			p.t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Len == 0 { // the watched directory itself
				if ev.Mask&unix.IN_OPEN != 0 {
					opened++
				}
				if ev.Mask&unix.IN_ACCESS != 0 {
					listed++
				}
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestOpenDoesNotListLocks: Open neither opens nor lists locks/, however
// many locks and temporary files it holds, and neither does the path of
// fence run and fence status (Acquire, Renew, Inspect, Release); List does
// (the probe's control: it must see a listing).
func TestOpenDoesNotListLocks(t *testing.T) {
	dir := newDir(t)
	c0 := openTB(t, dir)
	for i := range 20 {
		release(t, c0, acquire(t, c0, fmt.Sprintf("l%d", i), coord.AcquireOptions{Wait: 0}))
	}
	old := time.Now().Add(-time.Hour)
	legacy := filepath.Join(c0.locksDir, legacyTempPrefix+"123")
	leftover := c0.files("l1").temp
	for _, p := range []string{legacy, leftover} {
		if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	probe := newDirProbe(t, c0.locksDir)

	c := openTB(t, dir)
	if opened, listed := probe.take(); opened+listed != 0 {
		t.Fatalf("Open opened locks/ %d times, listed it %d times", opened, listed)
	}
	for _, p := range []string{legacy, leftover} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("Open touched a temporary file: %v", err)
		}
	}
	l := acquire(t, c, "l2", coord.AcquireOptions{Wait: 0})
	if _, err := c.Renew(tctx(t), l.Name, l.ID); err != nil {
		t.Fatal(err)
	}
	inspect(t, c, "l2")
	inspect(t, c, "never")
	release(t, c, l)
	if _, listed := probe.take(); listed != 0 { // opened: the directory fsync of a grant
		t.Fatalf("Acquire, Renew, Inspect, Release listed locks/ %d times", listed)
	}

	if _, err := c.List(tctx(t), ""); err != nil {
		t.Fatal(err)
	}
	if _, listed := probe.take(); listed == 0 {
		t.Fatal("the probe did not see List list locks/")
	}
}

// TestWriteReplacesLeftover: a lock's temporary file left by a writer that
// died before its rename (whatever its age: the flock says nobody writes)
// is replaced by the lock's next write, which leaves no temporary file; the
// name of a lock's temporary file fits for the longest escaped base and
// for a hashed one.
func TestWriteReplacesLeftover(t *testing.T) {
	c := openTB(t, newDir(t))
	for _, name := range []string{"lo", strings.Repeat("a", maxFileName-len(stateSuffix)), strings.Repeat("b", coord.MaxNameLen)} {
		f := c.files(name)
		if len(filepath.Base(f.temp)) > maxFileName {
			t.Fatalf("temporary file name of %d bytes", len(filepath.Base(f.temp)))
		}
		if name != "lo" {
			release(t, c, acquire(t, c, name, coord.AcquireOptions{Wait: 0}))
		}
		// What a crash between creating the file and renaming it leaves:
		// a young, partly written file (and a free flock).
		if err := os.WriteFile(f.temp, []byte(`{"version":2,"na`), 0o600); err != nil {
			t.Fatal(err)
		}
		l := acquire(t, c, name, coord.AcquireOptions{Wait: 0})
		if _, err := os.Lstat(f.temp); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%.10s…: leftover temporary file after a write: %v", name, err)
		}
		if li := inspect(t, c, name); !li.Held || li.Token != l.Token {
			t.Fatalf("%.10s…: after the write: %+v", name, li)
		}
		release(t, c, l)
	}
	if n := tempFiles(t, c); len(n) != 0 {
		t.Fatalf("temporary files left: %v", n)
	}
}

// TestListRemovesStaleTemps: a listing removes a lock's temporary file
// when its flock is free, never while a writer holds it; a temporary file
// of an older fence (random name) when it is older than a minute, never a
// younger one; and nothing that is not fence's.
func TestListRemovesStaleTemps(t *testing.T) {
	c := openTB(t, newDir(t))
	for _, name := range []string{"free", "busy"} {
		release(t, c, acquire(t, c, name, coord.AcquireOptions{Wait: 0}))
	}
	old := time.Now().Add(-time.Hour)
	files := map[string]time.Time{
		c.files("free").temp:                              time.Now(),
		c.files("busy").temp:                              old,
		filepath.Join(c.locksDir, legacyTempPrefix+"111"): old,
		filepath.Join(c.locksDir, legacyTempPrefix+"222"): time.Now(),
		c.files("nolockfile").temp:                        old,
	}
	for p, mt := range files {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	// A writer in progress on "busy": it holds the flock.
	fd, err := unix.Open(c.files("busy").lock, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	list := func() []string {
		t.Helper()
		if _, err := c.List(tctx(t), ""); err != nil {
			t.Fatal(err)
		}
		return tempFiles(t, c)
	}
	want := []string{tempPrefix + "busy", tempPrefix + "nolockfile", legacyTempPrefix + "222"}
	if got := list(); !equalSets(got, want) {
		t.Fatalf("after List with busy's flock held: %v, want %v", got, want)
	}
	unix.Close(fd)
	want = []string{tempPrefix + "nolockfile", legacyTempPrefix + "222"}
	if got := list(); !equalSets(got, want) {
		t.Fatalf("after List: %v, want %v", got, want)
	}
}

// TestListDuringWrites: listings running all along never remove the
// temporary file of a write in progress (its rename would fail).
func TestListDuringWrites(t *testing.T) {
	dir := newDir(t)
	ctx, cancel := context.WithTimeout(tctx(t), 20*time.Second)
	defer cancel()
	lister := openTB(t, dir)
	stop := make(chan struct{})
	var lists sync.WaitGroup
	lists.Add(1)
	go func() {
		defer lists.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := lister.List(ctx, ""); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := open(dir)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for i := range 60 {
				// Every grant replaces the state through the temporary file.
				l, err := c.Acquire(ctx, fmt.Sprintf("w%d-%d", w, i%3), coord.AcquireOptions{TTL: guard, Wait: 0})
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Release(ctx, l.Name, l.ID); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	lists.Wait()
	if n := tempFiles(t, lister); len(n) != 0 {
		t.Fatalf("temporary files left: %v", n)
	}
}

func tempFiles(t *testing.T, c *coordinator) []string {
	t.Helper()
	ents, err := os.ReadDir(c.locksDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if isTempName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func equalSets(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, s := range a {
		m[s] = true
	}
	for _, s := range b {
		if !m[s] {
			return false
		}
	}
	return true
}
