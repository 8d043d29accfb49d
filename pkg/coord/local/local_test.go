package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/internal/atomicfile"
)

func acquire(t testing.TB, c *coordinator, name string, o coord.AcquireOptions) *coord.Lease {
	t.Helper()
	if o.TTL == 0 {
		o.TTL = guard
	}
	l, err := c.Acquire(tctx(t), name, o)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	return l
}

func release(t testing.TB, c *coordinator, l *coord.Lease) {
	t.Helper()
	if err := c.Release(tctx(t), l.Name, l.ID); err != nil {
		t.Fatalf("Release(%q): %v", l.Name, err)
	}
}

func inspect(t testing.TB, c *coordinator, name string) coord.LockInfo {
	t.Helper()
	li, err := c.Inspect(tctx(t), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	return li
}

type result struct {
	l   *coord.Lease
	err error
}

func goAcquire(ctx context.Context, c *coordinator, name string, o coord.AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	if o.TTL == 0 {
		o.TTL = guard
	}
	go func() {
		l, err := c.Acquire(ctx, name, o)
		ch <- result{l, err}
	}()
	return ch
}

func await(t testing.TB, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(guard):
		t.Fatalf("%s: no result within %v", what, guard)
	}
	return result{}
}

// notYet checks that ch has no result for a short while (a safety check: a
// slow machine only makes it weaker, never makes it fail).
func notYet(t testing.TB, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned early: %v, %v", what, r.l, r.err)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestOpenLayoutAndModes(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	for _, d := range []string{dir, filepath.Join(dir, "locks")} {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want a 0700 directory", d, fi.Mode(), err)
		}
	}
	l := acquire(t, c, "jobs/backup", coord.AcquireOptions{})
	for _, f := range []string{c.StateFile("jobs/backup"), strings.TrimSuffix(c.StateFile("jobs/backup"), ".json") + ".lock"} {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want a 0600 file", f, fi.Mode(), err)
		}
	}
	if filepath.Base(c.StateFile("jobs/backup")) != "jobs%2Fbackup.json" {
		t.Errorf("state file %s", c.StateFile("jobs/backup"))
	}
	release(t, c, l)
	if got := c.Describe(); got != "local "+dir {
		t.Errorf("Describe = %q", got)
	}

	// A directory open to others is tightened; its files are checked one by one.
	loose := newDir(t)
	if err := os.MkdirAll(filepath.Join(loose, "locks"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(loose, 0o755)
	openTB(t, loose)
	for _, d := range []string{loose, filepath.Join(loose, "locks")} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
			t.Errorf("%s left with mode %v", d, fi.Mode().Perm())
		}
	}

	// Refused: a symlink, a file, and no directory at all.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	lockLink := newDir(t)
	os.MkdirAll(lockLink, 0o700)
	os.Symlink(filepath.Join(dir, "locks"), filepath.Join(lockLink, "locks"))
	for _, bad := range []string{link, file, lockLink} {
		if _, err := open(bad); !errors.Is(err, coord.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
			t.Errorf("open(%s) = %v, want one-line ErrUnavailable", bad, err)
		}
	}
	if _, err := open(""); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("open(\"\") = %v", err)
	}
	if os.Geteuid() == 0 {
		foreign := newDir(t)
		os.MkdirAll(foreign, 0o700)
		os.Chown(foreign, 65534, 65534)
		if _, err := open(foreign); !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("open(foreign-owned) = %v", err)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	if os.Geteuid() == 0 {
		if got := DefaultDir(); got != "/var/lib/fence" {
			t.Errorf("DefaultDir as root = %q", got)
		}
	}
	// As another user: XDG_STATE_HOME, else ~/.local/state.
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a helper as another user")
	}
	bin := copyExecutable(t)
	for _, tc := range []struct{ env, want string }{
		{"XDG_STATE_HOME=/x/state", "/x/state/fence"},
		{"XDG_STATE_HOME=relative", "/h/.local/state/fence"},
		{"XDG_STATE_HOME=", "/h/.local/state/fence"},
	} {
		cmd := execCommand(bin, "-test.run=^TestPrintDefaultDir$")
		cmd.Env = append(os.Environ(), "PRINT_DEFAULT_DIR=1", "HOME=/h", tc.env)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if got := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]); got != tc.want {
			t.Errorf("DefaultDir with %s = %q, want %q", tc.env, got, tc.want)
		}
	}
}

// TestPrintDefaultDir is run by TestDefaultDir in a helper process.
func TestPrintDefaultDir(t *testing.T) {
	if os.Getenv("PRINT_DEFAULT_DIR") == "" {
		t.Skip("helper for TestDefaultDir")
	}
	fmt.Println(DefaultDir())
}

func TestNamesEscapeAndHash(t *testing.T) {
	names := []string{"a", "a/b", "a%2Fb", ".", "..", ".hidden", "x.json", "x.lock", "=abc", "sp ace", "ünï ✓",
		strings.Repeat("x", coord.MaxNameLen), strings.Repeat("é", coord.MaxNameLen/2), strings.Repeat("/", 83)}
	seen := map[string]string{}
	for _, n := range names {
		base := fileBase(n)
		if len(base)+len(stateSuffix) > maxFileName || strings.ContainsAny(base, "/\x00") || strings.HasPrefix(base, ".") {
			t.Errorf("name %q: bad file base %q", n, base)
		}
		if other, dup := seen[base]; dup {
			t.Errorf("names %q and %q share file base %q", n, other, base)
		}
		seen[base] = n
		if got, ok := nameFromBase(base); ok && got != n {
			t.Errorf("name %q: base %q decodes to %q", n, base, got)
		} else if !ok && !strings.HasPrefix(base, hashPrefix) {
			t.Errorf("name %q: base %q does not decode", n, base)
		}
	}
	for _, bad := range []string{"%2", "%zz", "%2f", "a b", ".x"} {
		if _, ok := atomicfile.Unescape(bad); ok {
			t.Errorf("atomicfile.Unescape(%q) accepted", bad)
		}
	}
	// The longest names work end to end, List reads their real name.
	c := openTB(t, newDir(t))
	long := strings.Repeat("é", coord.MaxNameLen/2)
	l := acquire(t, c, long, coord.AcquireOptions{})
	if !strings.HasPrefix(filepath.Base(c.StateFile(long)), hashPrefix) {
		t.Errorf("long name not hashed: %s", c.StateFile(long))
	}
	l2 := acquire(t, c, "a", coord.AcquireOptions{Wait: 0})
	l3 := acquire(t, c, "a/b", coord.AcquireOptions{Wait: 0}) // independent of "a"
	list, err := c.List(tctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Name != "a" || list[1].Name != "a/b" || list[2].Name != long {
		t.Fatalf("List = %+v", list)
	}
	for _, x := range []*coord.Lease{l, l2, l3} {
		release(t, c, x)
	}
}

// TestFileBaseLayout pins the state files' names, part of the layout on
// disk: an escape while the file name fits 255 bytes, then "=" and the
// SHA-256 of the name.
func TestFileBaseLayout(t *testing.T) {
	for name, want := range map[string]string{
		"jobs/nightly":          "jobs%2Fnightly",
		".dot":                  "%2Edot",
		strings.Repeat("/", 83): strings.Repeat("%2F", 83),
		strings.Repeat("/", 84): "=8d8a0b8f6e594de79f1b6c7498568015a008f8d1ba2e3f866fef151c090975bf",
	} {
		if got := fileBase(name); got != want {
			t.Errorf("fileBase(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestMutualExclusion: goroutines with their own Coordinators and separate
// processes contend for one lock; the log of entries and exits must show no
// overlap and strictly increasing tokens.
func TestMutualExclusion(t *testing.T) {
	const goroutines, procs, rounds = 16, 4, 3
	dir := newDir(t)
	log := filepath.Join(t.TempDir(), "log")
	var hs []*helper
	for i := 0; i < procs; i++ {
		hs = append(hs, spawn(t, nil, "contend", dir, "mutex", strconv.Itoa(rounds), log))
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for i := 0; i < goroutines; i++ {
		c := openTB(t, dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := contend(tctx(t), c, "mutex", rounds, log, fmt.Sprintf("g%d", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, h := range hs {
		if err := waitExit(h); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*(goroutines+procs)*rounds {
		t.Fatalf("log has %d lines, want %d", len(lines), 2*(goroutines+procs)*rounds)
	}
	var last uint64
	for i := 0; i < len(lines); i += 2 {
		var tb, te uint64
		var wb, we string
		fmt.Sscanf(lines[i], "B %d %s", &tb, &wb)
		fmt.Sscanf(lines[i+1], "E %d %s", &te, &we)
		if !strings.HasPrefix(lines[i], "B ") || !strings.HasPrefix(lines[i+1], "E ") || tb != te || wb != we {
			t.Fatalf("overlap at log line %d: %q then %q", i+1, lines[i], lines[i+1])
		}
		if tb <= last {
			t.Fatalf("token %d after %d at log line %d", tb, last, i+1)
		}
		last = tb
	}
}

// waitExit waits for a helper that finishes by itself.
func waitExit(h *helper) error {
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(guard):
		return errors.New("helper did not finish")
	}
}

func TestTokensAcrossReopen(t *testing.T) {
	dir := newDir(t)
	var last uint64
	for round := 0; round < 3; round++ {
		c, err := open(dir)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			l := acquire(t, c, "tok", coord.AcquireOptions{Wait: 0})
			if l.Token <= last {
				t.Fatalf("token %d after %d (round %d)", l.Token, last, round)
			}
			last = l.Token
			release(t, c, l)
		}
		if li := inspect(t, c, "tok"); li.Held || li.LastToken != last {
			t.Fatalf("Inspect after release = %+v, want free with last token %d", li, last)
		}
		c.Close()
	}
	if last != 9 {
		t.Errorf("last token %d, want 9", last)
	}
}

func TestFIFO(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	holder := acquire(t, c, "fifo", coord.AcquireOptions{Holder: "first"})
	const n = 5
	var chans []<-chan result
	for i := 0; i < n; i++ {
		queued := make(chan coord.LockInfo, 1)
		chans = append(chans, goAcquire(tctx(t), openTB(t, dir), "fifo", coord.AcquireOptions{
			Holder: fmt.Sprint("w", i), Wait: coord.WaitForever,
			OnWait: func(li coord.LockInfo) { queued <- li },
		}))
		select {
		case li := <-queued:
			if !li.Held || li.Holder != "first" || li.Waiters != i+1 {
				t.Errorf("OnWait of waiter %d got %+v", i, li)
			}
		case <-time.After(guard):
			t.Fatal("waiter did not queue")
		}
	}
	// A separate process queues last.
	h := spawn(t, nil, "wait", dir, "fifo", "1m", "process")
	h.expect("queued")
	release(t, c, holder)
	last := holder.Token
	for i, ch := range chans {
		r := await(t, ch, fmt.Sprint("waiter ", i))
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.l.Holder != fmt.Sprint("w", i) || r.l.Token <= last {
			t.Fatalf("grant %d went to %s with token %d (last %d)", i, r.l.Holder, r.l.Token, last)
		}
		last = r.l.Token
		// The next ones are still waiting.
		for _, other := range chans[i+1:] {
			select {
			case r := <-other:
				t.Fatalf("a later waiter got the lock out of turn: %+v %v", r.l, r.err)
			default:
			}
		}
		if err := c.Release(tctx(t), "fifo", r.l.ID); err != nil {
			t.Fatal(err)
		}
	}
	f := h.expect("acquired")
	if tok, _ := strconv.ParseUint(f[1], 10, 64); tok <= last {
		t.Fatalf("the process got token %s after %d", f[1], last)
	}
}

func TestNoWaitTimeoutCancel(t *testing.T) {
	c := openTB(t, newDir(t))
	l := acquire(t, c, "busy", coord.AcquireOptions{Holder: "owner"})
	start := time.Now()
	_, err := c.Acquire(tctx(t), "busy", coord.AcquireOptions{TTL: time.Minute, Wait: 0})
	if !errors.Is(err, coord.ErrBusy) || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("no-wait Acquire = %v", err)
	}
	_, err = c.Acquire(tctx(t), "busy", coord.AcquireOptions{TTL: time.Minute, Wait: 300 * time.Millisecond})
	if !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("Acquire with timeout = %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("timeout of 300ms gave up after %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(ctx, c, "busy", coord.AcquireOptions{Wait: coord.WaitForever})
	notYet(t, ch, "waiter")
	if li := inspect(t, c, "busy"); li.Waiters != 1 {
		t.Fatalf("waiters = %d, want 1", li.Waiters)
	}
	cancel()
	if r := await(t, ch, "cancelled waiter"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v", r.err)
	}
	// Every waiter that gave up has left the queue.
	if li := inspect(t, c, "busy"); li.Waiters != 0 || !li.Held {
		t.Fatalf("after giving up: %+v", li)
	}
	if _, err := c.Acquire(tctx(t), "busy", coord.AcquireOptions{TTL: time.Minute, Wait: -5}); !errors.Is(err, coord.ErrInvalid) {
		t.Errorf("negative wait = %v", err)
	}
	release(t, c, l)
	// Close ends a waiter.
	c2 := openTB(t, c.Dir())
	l = acquire(t, c, "busy", coord.AcquireOptions{})
	ch = goAcquire(tctx(t), c2, "busy", coord.AcquireOptions{Wait: coord.WaitForever})
	notYet(t, ch, "waiter")
	c2.Close()
	if r := await(t, ch, "waiter of a closed coordinator"); !errors.Is(r.err, coord.ErrUnavailable) {
		t.Fatalf("Acquire on a closed coordinator = %v", r.err)
	}
	if li := inspect(t, c, "busy"); li.Waiters != 0 {
		t.Fatalf("waiter of a closed coordinator left its ticket: %+v", li)
	}
	release(t, c, l)
}

func TestExpiryTakeover(t *testing.T) {
	c := openTB(t, newDir(t))
	const ttl = 300 * time.Millisecond
	old := acquire(t, c, "exp", coord.AcquireOptions{TTL: ttl})
	// The renewal extends the lease from a moment inside the call: the
	// lease lasts at least TTL after the call started.
	renewed := time.Now()
	if _, err := c.Renew(tctx(t), "exp", old.ID); err != nil {
		t.Fatal(err)
	}
	r := await(t, goAcquire(tctx(t), c, "exp", coord.AcquireOptions{Wait: coord.WaitForever}), "successor")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := time.Since(renewed); d < ttl {
		t.Fatalf("taken over %v after the last renewal, TTL %v", d, ttl)
	}
	if r.l.Token <= old.Token {
		t.Fatalf("token %d after %d", r.l.Token, old.Token)
	}
	if _, err := c.Renew(tctx(t), "exp", old.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("Renew of the expired lease = %v", err)
	}
	if err := c.Release(tctx(t), "exp", old.ID); err != nil {
		t.Fatalf("Release of a replaced lease = %v", err)
	}
	wantHeld(t, c, r.l)
	release(t, c, r.l)
	// Expiry without a successor: the lock reads free.
	l := acquire(t, c, "exp", coord.AcquireOptions{TTL: ttl})
	time.Sleep(ttl + 50*time.Millisecond)
	if li := inspect(t, c, "exp"); li.Held || li.LastToken != l.Token {
		t.Fatalf("after expiry: %+v", li)
	}
	if _, err := c.Renew(tctx(t), "exp", l.ID); !errors.Is(err, coord.ErrLeaseLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Renew after expiry = %v", err)
	}
}

func wantHeld(t testing.TB, c *coordinator, l *coord.Lease) {
	t.Helper()
	li := inspect(t, c, l.Name)
	if !li.Held || li.Token != l.Token || li.LeaseID != l.ID {
		t.Fatalf("Inspect = %+v, want held by token %d", li, l.Token)
	}
}

// TestKilledHolder: a lease attached to its process is taken over as soon as
// that process dies (SIGKILL), long before its TTL; a lease with no process
// attached (fence acquire) lasts until its TTL.
func TestKilledHolder(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	const ttl = time.Minute
	h := spawn(t, nil, "hold", dir, "killed", ttl.String(), "process")
	tok, _ := strconv.ParseUint(h.expect("acquired")[1], 10, 64)
	li := inspect(t, c, "killed")
	if !li.Held || li.Process == nil || len(li.Process.PIDs) != 1 || li.Process.PIDs[0] != h.cmd.Process.Pid {
		t.Fatalf("Inspect = %+v, want held with the helper's PID", li)
	}
	start := time.Now()
	ch := goAcquire(tctx(t), c, "killed", coord.AcquireOptions{Wait: coord.WaitForever})
	notYet(t, ch, "successor of a live holder")
	h.signal(syscall.SIGKILL)
	r := await(t, ch, "successor")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if d := time.Since(start); d >= ttl || r.l.Token <= tok {
		t.Fatalf("takeover after %v (TTL %v), token %d after %d", d, ttl, r.l.Token, tok)
	}
	release(t, c, r.l)

	h = spawn(t, nil, "hold", dir, "unattached", ttl.String())
	h.expect("acquired")
	h.kill()
	if _, err := c.Acquire(tctx(t), "unattached", coord.AcquireOptions{TTL: time.Minute, Wait: 0}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("a lease with no process was taken over when its holder died: %v", err)
	}
	if li := inspect(t, c, "unattached"); !li.Held || li.Process != nil {
		t.Fatalf("Inspect = %+v", li)
	}
}

// TestExpiredLeaseGroupKilled: the supervisor of a command (a helper that
// holds a lease attached to itself and to a `sleep` in its own process group)
// is frozen with SIGSTOP. The lease is not taken over early (the supervisor
// lives), but once its TTL has run out the successor kills the command's
// group before it takes the lock.
func TestExpiredLeaseGroupKilled(t *testing.T) {
	for _, wait := range []time.Duration{coord.WaitForever, 0} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			dir := newDir(t)
			c := openTB(t, dir)
			const ttl = 500 * time.Millisecond
			h := spawn(t, nil, "supervise", dir, "group", ttl.String())
			f := h.expect("ready")
			tok, _ := strconv.ParseUint(f[1], 10, 64)
			sleepPID, _ := strconv.Atoi(f[2])
			sleeper, err := proc.Lookup(sleepPID)
			if err != nil {
				t.Fatal(err)
			}
			// The lease expires no earlier than TTLLeft after this reading.
			seen := time.Now()
			li := inspect(t, c, "group")
			if li.Process == nil || li.Process.PGID != sleepPID {
				t.Fatalf("Inspect = %+v, want the command's group attached", li)
			}
			h.signal(syscall.SIGSTOP)
			if wait == 0 {
				time.Sleep(ttl + 100*time.Millisecond)
			}
			r := await(t, goAcquire(tctx(t), c, "group", coord.AcquireOptions{Wait: wait}), "successor")
			if r.err != nil {
				t.Fatal(r.err)
			}
			if d := time.Since(seen); d < li.TTLLeft {
				t.Fatalf("taken over after %v, before the lease's %v left ran out (the supervisor is alive)", d, li.TTLLeft)
			}
			if sleeper.Alive() {
				t.Fatal("the successor holds the lock while the old command still runs")
			}
			if r.l.Token <= tok {
				t.Fatalf("token %d after %d", r.l.Token, tok)
			}
			h.signal(syscall.SIGCONT)
		})
	}
}

// TestExpiredLeaseGroupNotPermitted: when the successor may not signal the
// old command's group (another user's processes), it waits for the group to
// end and counts the lock as busy meanwhile.
func TestExpiredLeaseGroupNotPermitted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run helpers as another user")
	}
	dir := sharedTempDir(t)
	os.Chown(dir, 65534, 65534)
	os.Chmod(dir, 0o700)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	// Root's command group and a stopped root "supervisor".
	group := startSleep(t, true)
	super := startSleep(t, false)
	super.Process.Signal(syscall.SIGSTOP)
	h := spawn(t, nobody, "attached", dir, "perm", "300ms", strconv.Itoa(super.Process.Pid), strconv.Itoa(group.Process.Pid))
	h.expect("acquired")
	time.Sleep(400 * time.Millisecond) // past the TTL
	busyH := spawn(t, nobody, "try", dir, "perm", "500ms")
	if f := busyH.next("result"); !strings.HasPrefix(f, "error ") || !strings.Contains(f, "busy") && !strings.Contains(f, "held") && !strings.Contains(f, "still running") {
		t.Fatalf("successor that may not kill the group: %q, want busy", f)
	}
	if _, err := proc.Lookup(group.Process.Pid); err != nil {
		t.Fatal("the group was killed by a user who may not signal it")
	}
	waiter := spawn(t, nobody, "try", dir, "perm", "forever")
	select {
	case l := <-waiter.lines:
		t.Fatalf("successor got %q while the old command runs", l)
	case <-time.After(200 * time.Millisecond):
	}
	syscall.Kill(-group.Process.Pid, syscall.SIGKILL)
	waiter.expect("acquired")
}

func startSleep(t testing.TB, ownGroup bool) *execCmd {
	t.Helper()
	cmd := execCommand("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Wait()
	})
	return cmd
}

// TestRevoke: a plain lease ends at once; a lease attached to a command group
// that still runs keeps the lock busy until the group ends (or the TTL).
func TestRevoke(t *testing.T) {
	c := openTB(t, newDir(t))
	if _, err := c.Revoke(tctx(t), "rev"); !errors.Is(err, coord.ErrNotHeld) {
		t.Fatalf("Revoke of a free lock = %v", err)
	}
	l := acquire(t, c, "rev", coord.AcquireOptions{Holder: "victim"})
	li, err := c.Revoke(tctx(t), "rev")
	if err != nil || li.Token != l.Token || li.Holder != "victim" {
		t.Fatalf("Revoke = %+v, %v", li, err)
	}
	if _, err := c.Renew(tctx(t), "rev", l.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("Renew after revoke = %v", err)
	}
	l2 := acquire(t, c, "rev", coord.AcquireOptions{Wait: 0})
	release(t, c, l2)

	group := startSleep(t, true)
	self := os.Getpid()
	l = acquire(t, c, "rev", coord.AcquireOptions{Process: &coord.ProcessInfo{PIDs: []int{self}, PGID: group.Process.Pid}})
	if _, err := c.Revoke(tctx(t), "rev"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(tctx(t), "rev", l.ID); !errors.Is(err, coord.ErrLeaseLost) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("Renew after revoke = %v", err)
	}
	if err := c.AttachProcess(tctx(t), "rev", l.ID, coord.ProcessInfo{PGID: group.Process.Pid}); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("AttachProcess after revoke = %v", err)
	}
	if li := inspect(t, c, "rev"); li.Held {
		t.Fatalf("revoked lease still shown as held: %+v", li)
	}
	ch := goAcquire(tctx(t), c, "rev", coord.AcquireOptions{Wait: coord.WaitForever})
	notYet(t, ch, "successor while the revoked command runs")
	group.Process.Kill() // the supervisor stops its command
	r := await(t, ch, "successor")
	if r.err != nil || r.l.Token <= l.Token {
		t.Fatalf("successor: %+v, %v", r.l, r.err)
	}
}

func TestInspectListProcess(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	if li := inspect(t, c, "never"); li.Held || li.LastToken != 0 || li.Name != "never" {
		t.Fatalf("Inspect of an unused lock = %+v", li)
	}
	free := acquire(t, c, "l/free", coord.AcquireOptions{})
	release(t, c, free)
	before := time.Now()
	held := acquire(t, c, "l/held", coord.AcquireOptions{Holder: "me", TTL: time.Minute,
		Process: &coord.ProcessInfo{PIDs: []int{os.Getpid()}}})
	group := startSleep(t, true)
	if err := c.AttachProcess(tctx(t), "l/held", held.ID, coord.ProcessInfo{PGID: group.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	ch := goAcquire(tctx(t), openTB(t, dir), "l/held", coord.AcquireOptions{Wait: coord.WaitForever})
	notYet(t, ch, "waiter")
	li := inspect(t, c, "l/held")
	switch {
	case !li.Held, li.Holder != "me", li.Token != held.Token, li.LeaseID != held.ID, li.TTL != time.Minute,
		li.TTLLeft <= 0 || li.TTLLeft > time.Minute, li.AcquiredAt.Before(before.Add(-time.Second)),
		li.LastToken != held.Token, li.Waiters != 1,
		li.Process == nil || li.Process.PGID != group.Process.Pid || len(li.Process.PIDs) != 1 || li.Process.PIDs[0] != os.Getpid():
		t.Fatalf("Inspect = %+v", li)
	}
	if li.HeldFor(time.Now()) < 0 {
		t.Fatal("negative held-for")
	}
	acquire(t, c, "other", coord.AcquireOptions{})
	list, err := c.List(tctx(t), "l/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "l/free" || list[0].Held || list[0].LastToken != free.Token || list[1].Name != "l/held" || !list[1].Held {
		t.Fatalf("List(l/) = %+v", list)
	}
	if all, _ := c.List(tctx(t), ""); len(all) != 3 {
		t.Fatalf("List() = %+v", all)
	}
	release(t, c, held)
	r := await(t, ch, "waiter")
	release(t, c, r.l)
}

func TestWatch(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	ctx, cancel := context.WithCancel(tctx(t))
	events, err := c.Watch(ctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	next := func(want coord.EventType, check func(coord.LockInfo) bool) {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("watch channel closed")
				}
				if ev.Info.Name != "w/x" {
					t.Fatalf("event for %q", ev.Info.Name)
				}
				if ev.Type == want && check(ev.Info) {
					return
				}
				t.Logf("skipping %s %+v", ev.Type, ev.Info)
			case <-time.After(guard):
				t.Fatalf("no %s event", want)
			}
		}
	}
	acquire(t, c, "elsewhere", coord.AcquireOptions{}) // outside the prefix
	l := acquire(t, c, "w/x", coord.AcquireOptions{TTL: 400 * time.Millisecond, Holder: "h1"})
	next(coord.EventAcquired, func(li coord.LockInfo) bool { return li.Held && li.Token == l.Token && li.Holder == "h1" })
	if _, err := c.Renew(tctx(t), "w/x", l.ID); err != nil {
		t.Fatal(err)
	}
	next(coord.EventRenewed, func(li coord.LockInfo) bool { return li.Token == l.Token })
	// Expiry is seen without any write.
	next(coord.EventReleased, func(li coord.LockInfo) bool { return !li.Held })
	l = acquire(t, c, "w/x", coord.AcquireOptions{Holder: "h2"})
	next(coord.EventAcquired, func(li coord.LockInfo) bool { return li.Holder == "h2" })
	wctx, wcancel := context.WithCancel(tctx(t))
	ch := goAcquire(wctx, openTB(t, dir), "w/x", coord.AcquireOptions{Wait: coord.WaitForever, Holder: "h3"})
	next(coord.EventWaiters, func(li coord.LockInfo) bool { return li.Waiters == 1 && li.Holder == "h2" })
	release(t, c, l)
	next(coord.EventAcquired, func(li coord.LockInfo) bool { return li.Holder == "h3" && li.Waiters == 0 })
	r := await(t, ch, "waiter")
	if _, err := c.Revoke(tctx(t), "w/x"); err != nil {
		t.Fatal(err)
	}
	next(coord.EventReleased, func(li coord.LockInfo) bool { return !li.Held && li.LastToken == r.l.Token })
	wcancel()
	cancel()
	select {
	case _, ok := <-events:
		for ok {
			_, ok = <-events
		}
	case <-time.After(guard):
		t.Fatal("watch channel not closed after cancel")
	}
	// Close also ends a watch.
	c2 := openTB(t, dir)
	ev2, err := c2.Watch(tctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	for range ev2 {
	}
}

// TestStoppedAndDeadWaiters: a waiter frozen with SIGSTOP is passed over while
// it is stopped; a dead waiter is dropped from the queue.
func TestStoppedAndDeadWaiters(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	c.stallCheck = 100 * time.Millisecond
	l := acquire(t, c, "q", coord.AcquireOptions{})
	stopped := spawn(t, nil, "wait", dir, "q", "1m", "process")
	stopped.expect("queued")
	dead := spawn(t, nil, "wait", dir, "q", "1m", "process")
	dead.expect("queued")
	stopped.signal(syscall.SIGSTOP)
	dead.signal(syscall.SIGKILL)
	ch := goAcquire(tctx(t), c, "q", coord.AcquireOptions{Wait: coord.WaitForever})
	notYet(t, ch, "third waiter")
	release(t, c, l)
	r := await(t, ch, "third waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	st, err := load(c.files("q"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Queue) != 1 || st.Queue[0].PID != stopped.cmd.Process.Pid {
		t.Fatalf("queue %+v, want only the stopped waiter", st.Queue)
	}
	// Once continued, the stopped waiter gets its turn.
	stopped.signal(syscall.SIGCONT)
	release(t, c, r.l)
	stopped.expect("acquired")
}

// TestHolderKilledRightAfterGrant: the new holder is killed right after its
// grant: the next waiter, which follows the holder's process, takes over at
// once.
func TestHolderKilledRightAfterGrant(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	l := acquire(t, c, "bell-kill", coord.AcquireOptions{})
	var ws []*helper
	for i := 0; i < 3; i++ {
		h := spawn(t, nil, "wait", dir, "bell-kill", "1m", "process")
		h.expect("queued")
		ws = append(ws, h)
	}
	release(t, c, l)
	ws[0].expect("acquired")
	killed := time.Now()
	ws[0].signal(syscall.SIGKILL)
	ws[1].expect("acquired")
	// By the holder's process, not by the stall check (1s) that a waiter
	// which found the lock free but not its turn falls back on.
	if d := time.Since(killed); d > 500*time.Millisecond {
		t.Errorf("the next waiter took over %v after the holder's death: it did not follow the holder's process", d)
	}
	for _, h := range ws {
		h.kill()
	}
}

// TestCorruptStateFailsClosed: every kind of untrustworthy state file is an
// ErrUnavailable error naming the file, from every operation, and is left as
// it was; the token goes on from where it was once the file is repaired.
func TestCorruptStateFailsClosed(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	l := acquire(t, c, "c", coord.AcquireOptions{Wait: 0})
	release(t, c, l)
	path := c.StateFile("c")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(b []byte, mode os.FileMode) func() {
		return func() {
			os.Remove(path)
			if err := os.WriteFile(path, b, mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, mode)
		}
	}
	sub := func(old, new string) []byte { return []byte(strings.Replace(string(good), old, new, 1)) }
	variants := []struct {
		name  string
		setup func()
		want  string
	}{
		{"garbage", replace([]byte("\x00\xffnot json"), 0o600), "corrupt"},
		{"truncated", replace(good[:len(good)/2], 0o600), "truncated"},
		{"empty", replace(nil, 0o600), "empty"},
		{"null", replace([]byte("null"), 0o600), "no format version"},
		{"newer", replace(sub(`"version":2`, `"version":4`), 0o600), "newer fence"},
		{"other-name", replace(sub(`"name":"c"`, `"name":"d"`), 0o600), `belongs to lock "d"`},
		{"inconsistent", replace([]byte(`{"version":2,"name":"c","last_token":1,"holder":{"lease_id":"x","holder":"h","token":7,"ttl_ns":1,"expires_at":1}}`), 0o600), "inconsistent"},
		{"record", replace(sub(` s=r `, ` s=h `), 0o600), "lease record that does not check out"},
		{"record-other-token", replace(recordOfToken(good), 0o600), "lease record of token 1, holder token 2"},
		{"mode", replace(good, 0o644), "mode 0644"},
		{"symlink", func() {
			cp := filepath.Join(t.TempDir(), "copy")
			os.WriteFile(cp, good, 0o600)
			os.Remove(path)
			os.Symlink(cp, path)
		}, "symbolic link"},
		{"directory", func() { os.Remove(path); os.Mkdir(path, 0o700) }, "not a regular file"},
		{"fifo", func() { os.Remove(path); syscall.Mkfifo(path, 0o600) }, "not a regular file"},
	}
	if os.Geteuid() == 0 {
		variants = append(variants, struct {
			name  string
			setup func()
			want  string
		}{"foreign-owner", func() { replace(good, 0o600)(); os.Lchown(path, 65534, 65534) }, "owned by uid 65534"})
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			v.setup()
			defer func() { os.RemoveAll(path); os.WriteFile(path, good, 0o600) }()
			snap := snapshot(path)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c2 := openTB(t, dir)
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), v.want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s = %v, want a one-line ErrUnavailable saying %q", op, err, v.want)
				}
			}
			_, err := c2.Inspect(ctx, "c")
			check("Inspect", err)
			_, err = c2.Acquire(ctx, "c", coord.AcquireOptions{TTL: time.Minute, Wait: 0})
			check("Acquire", err)
			_, err = c2.Acquire(ctx, "c", coord.AcquireOptions{TTL: time.Minute, Wait: coord.WaitForever})
			check("Acquire(wait)", err)
			_, err = c2.Renew(ctx, "c", newID("c"))
			check("Renew", err)
			_, err = c2.Revoke(ctx, "c")
			check("Revoke", err)
			_, err = c2.List(ctx, "")
			check("List", err)
			if snapshot(path) != snap {
				t.Errorf("the %s state file was changed", v.name)
			}
		})
	}
	l = acquire(t, c, "c", coord.AcquireOptions{Wait: 0})
	if l.Token != 2 {
		t.Fatalf("token after repair = %d, want 2", l.Token)
	}
	// A symlinked lock file is refused too.
	lockPath := strings.TrimSuffix(c.StateFile("s"), ".json") + ".lock"
	os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), lockPath)
	if _, err := c.Acquire(tctx(t), "s", coord.AcquireOptions{TTL: time.Minute}); !errors.Is(err, coord.ErrUnavailable) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Acquire with a symlinked lock file = %v", err)
	}
}

// recordOfToken returns the state b (holder token 1) with its holder's
// token (and last token) raised to 2 and its lease record left as it was.
func recordOfToken(b []byte) []byte {
	s := strings.Replace(string(b), `"last_token":1`, `"last_token":2`, 1)
	s = strings.Replace(s, `"reserved_token":1`, `"reserved_token":2`, 1)
	return []byte(strings.Replace(s, `"token":1`, `"token":2`, 1))
}

func snapshot(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return err.Error()
	}
	var b []byte
	if fi.Mode().IsRegular() {
		b, _ = os.ReadFile(path)
	}
	target, _ := os.Readlink(path)
	return fmt.Sprintf("%v %q %q", fi.Mode(), b, target)
}

// TestOtherBootAndExt: a state written during another boot has no live
// holder or waiter but keeps its token; data under "ext" survives rewrites.
func TestOtherBootAndExt(t *testing.T) {
	c := openTB(t, newDir(t))
	path := c.StateFile("boot")
	state := `{"version":1,"name":"boot","last_token":41,"boot_id":"another-boot",` +
		`"holder":{"lease_id":"x","holder":"old","token":41,"ttl_ns":60000000000,"acquired_at":"2020-01-01T00:00:00Z","expires_at":99999999999999999},` +
		`"queue":[{"id":"t","pid":1,"start":1}],"ext":{"history":[{"kind":"acquired"}]}}`
	if err := os.WriteFile(path, []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	if li := inspect(t, c, "boot"); li.Held || li.Waiters != 0 || li.LastToken != 41 {
		t.Fatalf("state of another boot: %+v", li)
	}
	l := acquire(t, c, "boot", coord.AcquireOptions{Wait: 0})
	if l.Token != 42 {
		t.Fatalf("token %d, want 42", l.Token)
	}
	release(t, c, l)
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"ext":{"history":[{"kind":"acquired"}]}`) {
		t.Fatalf("ext lost: %s", b)
	}
}

// TestCrashSafety: a process SIGKILLed at random points of many
// acquire/release cycles never leaves a corrupt state, never lowers the
// token, and never leaves a holder behind that blocks the lock (its lease is
// attached to it).
func TestCrashSafety(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	var last uint64
	for round := 0; round < 6; round++ {
		h := spawn(t, nil, "cycle", dir, "crash")
		n := 3 + round*7
		for i := 0; i < n; i++ {
			f := h.expect("T")
			tok, _ := strconv.ParseUint(f[1], 10, 64)
			if tok <= last {
				t.Fatalf("token %d after %d", tok, last)
			}
			last = tok
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		h.signal(syscall.SIGKILL)
		h.kill()
		li, err := c.Inspect(tctx(t), "crash")
		if err != nil {
			t.Fatalf("after SIGKILL in round %d: %v", round, err)
		}
		if li.LastToken < last {
			t.Fatalf("last token %d went below %d", li.LastToken, last)
		}
		l := acquire(t, c, "crash", coord.AcquireOptions{Wait: 5 * time.Second})
		if l.Token <= li.LastToken {
			t.Fatalf("token %d after last token %d", l.Token, li.LastToken)
		}
		last = l.Token
		release(t, c, l)
	}
}

// TestNoInotify: without inotify, waiters still get the lock, a Watch sees
// the grant and a lease watch the revoke (by looking again every 200ms).
func TestNoInotify(t *testing.T) {
	old := newWatcher
	newWatcher = failingWatcher
	defer func() { newWatcher = old }()
	dir := newDir(t)
	c := openTB(t, dir)
	events, err := c.Watch(tctx(t), "n")
	if err != nil {
		t.Fatal(err)
	}
	l := acquire(t, c, "n", coord.AcquireOptions{})
	ch := goAcquire(tctx(t), openTB(t, dir), "n", coord.AcquireOptions{Wait: coord.WaitForever, Holder: "waiter"})
	notYet(t, ch, "waiter")
	release(t, c, l)
	r := await(t, ch, "waiter")
	if r.err != nil {
		t.Fatal(r.err)
	}
	for seen := false; !seen; {
		select {
		case ev := <-events:
			seen = ev.Type == coord.EventAcquired && ev.Info.Holder == "waiter"
		case <-time.After(guard):
			t.Fatal("the watch saw no grant to the waiter")
		}
	}
	lw, err := c.WatchLease(tctx(t), "n", r.l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(tctx(t), "n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lw:
		if !errors.Is(err, coord.ErrLeaseLost) {
			t.Fatalf("lease watch: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("the lease watch saw no revoke")
	}
}

// TestOtherPIDNamespace: a lease attached to processes of another PID
// namespace (a container sharing the state directory) cannot be checked
// here: it is judged by its TTL alone, is never taken over early, and its
// process group (a number that means another group here) is never
// signalled.
func TestOtherPIDNamespace(t *testing.T) {
	c := openTB(t, newDir(t))
	group := startSleep(t, true) // a local group that happens to have the recorded PGID
	write := func(expires string) {
		st := `{"version":1,"name":"ns","last_token":3,"boot_id":"` + bootID() + `",` +
			`"holder":{"lease_id":"x","holder":"container","token":3,"ttl_ns":60000000000,"acquired_at":"2020-01-01T00:00:00Z",` +
			`"expires_at":` + expires + `,"pids":[{"pid":999999,"start":5}],"pgid":{"pid":` + strconv.Itoa(group.Process.Pid) + `,"start":0},` +
			`"pidns":"pid:[1]"}}`
		if err := os.WriteFile(c.StateFile("ns"), []byte(st), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(strconv.FormatInt(int64(clock.Now().Add(time.Minute)), 10))
	// Its recorded process is gone here, yet the lease holds until its TTL.
	if _, err := c.Acquire(tctx(t), "ns", coord.AcquireOptions{TTL: time.Minute, Wait: 0}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("a lease of another PID namespace was taken over early: %v", err)
	}
	if li := inspect(t, c, "ns"); !li.Held || li.Token != 3 {
		t.Fatalf("Inspect = %+v", li)
	}
	// Expired: taken over without signalling the local group of that number.
	write("1")
	l := acquire(t, c, "ns", coord.AcquireOptions{Wait: 0})
	if l.Token != 4 {
		t.Fatalf("token %d, want 4", l.Token)
	}
	if _, err := proc.Lookup(group.Process.Pid); err != nil {
		t.Fatal("a process group of this namespace was killed for a lease of another")
	}
}

// TestWatchSeesShortHolds: a hold that begins and ends between two scans of
// a watch (acquire and release at once, as fence shards drain does with the
// group's settings lock) is still reported: the lock is free again, under
// a newer last token. A watch that compared only held and free missed it,
// and the members of a group never read the drain.
func TestWatchSeesShortHolds(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	ctx, cancel := context.WithCancel(tctx(t))
	defer cancel()
	events, err := c.Watch(ctx, "short/")
	if err != nil {
		t.Fatal(err)
	}
	missed := 0
	for i := range 50 {
		l := acquire(t, c, "short/x", coord.AcquireOptions{Holder: fmt.Sprint("h", i)})
		release(t, c, l)
		for seen := false; !seen; {
			select {
			case ev := <-events:
				seen = !ev.Info.Held && ev.Info.LastToken >= l.Token
			case <-time.After(2 * time.Second):
				missed++
				seen = true
			}
		}
	}
	if missed > 0 {
		t.Fatalf("%d of 50 short holds were never reported as ended", missed)
	}
}
