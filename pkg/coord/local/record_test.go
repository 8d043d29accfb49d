package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

func TestRecordEncoding(t *testing.T) {
	for _, r := range []record{
		{token: 1, expires: 5},
		{token: 1<<64 - 1, expires: clock.Now().Add(time.Hour), released: true},
		{token: 42, expires: 7, group: &proc.ID{PID: 4194304, Start: 1<<64 - 1}},
		{token: 42, expires: 7, group: &proc.ID{PID: 77}},
	} {
		s := r.encode()
		if len(s) != recordLen || strings.ContainsAny(s, `"\`) {
			t.Fatalf("encode(%+v) = %q: %d bytes, want %d, nothing to escape in JSON", r, s, len(s), recordLen)
		}
		got, ok := decodeRecord(s)
		if !ok || got.token != r.token || got.expires != r.expires || got.released != r.released ||
			(got.group == nil) != (r.group == nil) || (r.group != nil && *got.group != *r.group) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", r, got, ok)
		}
		// Any single changed byte is refused (a record read half-written).
		for i := range s {
			b := []byte(s)
			b[i] ^= 1
			if _, ok := decodeRecord(string(b)); ok {
				t.Fatalf("record with byte %d changed accepted: %q", i, b)
			}
		}
	}
	if _, ok := decodeRecord(""); ok {
		t.Fatal("empty record accepted")
	}
	// The in-place writes rely on where json.Marshal puts the record.
	st := &state{Name: "x", LastToken: 3, Holder: &holder{LeaseID: "l", Token: 3, TTL: time.Second}}
	st.Version, st.Lease = formatVersion, recordOf(st.Holder).encode()
	b, err := json.Marshal(st)
	if err != nil || !hasRecord(b) {
		t.Fatalf("state %s (%v) does not have its lease record at offset %d", b, err, recordOffset)
	}
}

// stateInfo returns a state file's inode and bytes.
func stateInfo(t testing.TB, path string) (uint64, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, b
}

// TestRenewReleaseInPlace: a renewal and a release overwrite the lease
// record in the state file (same inode, same size, only the record changes:
// no temporary file, no rename), and every reader, in this process or
// another, sees them.
func TestRenewReleaseInPlace(t *testing.T) {
	dir := newDir(t)
	c, other := openTB(t, dir), openTB(t, dir)
	l := acquire(t, c, "rec", coord.AcquireOptions{TTL: time.Minute})
	path := c.StateFile("rec")
	ino0, b0 := stateInfo(t, path)
	if !hasRecord(b0) {
		t.Fatalf("state after Acquire has no lease record: %s", b0)
	}
	time.Sleep(20 * time.Millisecond)
	before := inspect(t, other, "rec").TTLLeft
	if _, err := c.Renew(tctx(t), "rec", l.ID); err != nil {
		t.Fatal(err)
	}
	ino1, b1 := stateInfo(t, path)
	if ino1 != ino0 || len(b1) != len(b0) || !sameButRecord(b0, b1) || string(b0) == string(b1) {
		t.Fatalf("Renew did not just overwrite the record:\n%s\n%s", b0, b1)
	}
	if after := inspect(t, other, "rec").TTLLeft; after <= before {
		t.Fatalf("another coordinator sees TTL left %v after the renewal, %v before", after, before)
	}
	// A process sees the renewal as well: it cannot take the lock.
	h := spawn(t, nil, "try", dir, "rec", "0")
	if f := h.expect("error"); !strings.Contains(strings.Join(f, " "), "busy") {
		t.Fatalf("another process: %v", f)
	}
	release(t, c, l)
	ino2, b2 := stateInfo(t, path)
	if ino2 != ino0 || !sameButRecord(b0, b2) {
		t.Fatalf("Release did not just overwrite the record:\n%s\n%s", b0, b2)
	}
	if li := inspect(t, other, "rec"); li.Held || li.LastToken != l.Token {
		t.Fatalf("after Release another coordinator sees %+v", li)
	}
	if _, err := c.Renew(tctx(t), "rec", l.ID); !errors.Is(err, coord.ErrLeaseLost) {
		t.Fatalf("Renew after Release = %v", err)
	}
	if l2 := acquire(t, other, "rec", coord.AcquireOptions{Wait: 0}); l2.Token != l.Token+1 {
		t.Fatalf("token %d after %d", l2.Token, l.Token)
	}
	ents, _ := os.ReadDir(c.locksDir)
	for _, e := range ents {
		if isTempName(e.Name()) {
			t.Errorf("temporary file %s left", e.Name())
		}
	}
}

// TestAttachGroupInPlace: fence run's AttachProcess (the same supervising
// processes, plus its command's group) overwrites the lease record, and the
// group counts: the lease is not abandoned while the group lives.
func TestAttachGroupInPlace(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	sup := startSleep(t, false)
	group := startSleep(t, true)
	l := acquire(t, c, "att", coord.AcquireOptions{Process: &coord.ProcessInfo{PIDs: []int{sup.Process.Pid}}})
	path := c.StateFile("att")
	ino0, b0 := stateInfo(t, path)
	err := c.AttachProcess(tctx(t), "att", l.ID, coord.ProcessInfo{PIDs: []int{sup.Process.Pid}, PGID: group.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if ino1, b1 := stateInfo(t, path); ino1 != ino0 || !sameButRecord(b0, b1) {
		t.Fatalf("AttachProcess did not just overwrite the record:\n%s\n%s", b0, b1)
	}
	if li := inspect(t, c, "att"); li.Process == nil || li.Process.PGID != group.Process.Pid {
		t.Fatalf("Inspect = %+v", li)
	}
	// The supervisor dies; the command's group still runs: the lease stays.
	sup.Process.Kill()
	sup.Wait()
	if _, err := c.Acquire(tctx(t), "att", coord.AcquireOptions{TTL: time.Minute, Wait: 0}); !errors.Is(err, coord.ErrBusy) {
		t.Fatalf("Acquire while the attached group runs = %v", err)
	}
	group.Process.Kill()
	group.Wait()
	l2 := acquire(t, c, "att", coord.AcquireOptions{Wait: 5 * time.Second})
	if l2.Token <= l.Token {
		t.Fatalf("token %d after %d", l2.Token, l.Token)
	}
}

// rewriteState edits a state file's JSON with edit.
func rewriteState(t testing.TB, path string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRebootDropsRecordKeepsTokens: after a reboot (a state of another boot)
// neither the holder nor its renewals count, and tokens go on above every
// token an older fence's reserved block may have handed out, even when the
// last writes before the crash were lost.
func TestRebootDropsRecordKeepsTokens(t *testing.T) {
	c := openTB(t, newDir(t))
	l := acquire(t, c, "boot", coord.AcquireOptions{TTL: time.Hour})
	if _, err := c.Renew(tctx(t), "boot", l.ID); err != nil {
		t.Fatal(err)
	}
	path := c.StateFile("boot")
	release(t, c, l)
	l2 := acquire(t, c, "boot", coord.AcquireOptions{TTL: time.Hour})
	if l2.Token != l.Token+1 {
		t.Fatalf("token %d after %d", l2.Token, l.Token)
	}
	// A fence before this one reserved tokens in blocks (reserved_token)
	// and made only the reservation durable: its crash may have lost the
	// write of the last grants (last_token went back). The boot changed.
	const reserved = 1000
	rewriteState(t, path, func(m map[string]any) {
		m["boot_id"] = "another-boot"
		m["reserved_token"] = reserved
		m["last_token"] = l.Token
		h := m["holder"].(map[string]any)
		h["token"] = l.Token
	})
	if li := inspect(t, c, "boot"); li.Held || li.LastToken != reserved {
		t.Fatalf("after a reboot: %+v, want free with last token %d (the reserved one)", li, reserved)
	}
	l3 := acquire(t, c, "boot", coord.AcquireOptions{Wait: 0})
	if l3.Token != reserved+1 {
		t.Fatalf("token %d after a reboot, want %d (above the reserved block)", l3.Token, reserved+1)
	}
}

// TestFormat1State: a state written by a fence of format 1 (no lease
// record, a lease id of 16 digits without its lock's tag) is honoured; its
// first renewal rewrites it in format 2, and the next ones overwrite the
// record.
func TestFormat1State(t *testing.T) {
	c := openTB(t, newDir(t))
	path := c.StateFile("v1")
	exp := clock.Now().Add(time.Minute)
	v1 := `{"version":1,"name":"v1","last_token":7,"boot_id":"` + bootID() + `",` +
		`"holder":{"lease_id":"0123456789abcdef","holder":"old","token":7,"ttl_ns":60000000000,"acquired_at":"2020-01-01T00:00:00Z","expires_at":` +
		strconv.FormatInt(int64(exp), 10) + `}}`
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	if li := inspect(t, c, "v1"); !li.Held || li.Token != 7 || li.Holder != "old" {
		t.Fatalf("format 1 holder: %+v", li)
	}
	if _, err := c.Renew(tctx(t), "v1", "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	ino1, b1 := stateInfo(t, path)
	if !hasRecord(b1) {
		t.Fatalf("after a renewal: %s", b1)
	}
	if _, err := c.Renew(tctx(t), "v1", "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if ino2, b2 := stateInfo(t, path); ino2 != ino1 || !sameButRecord(b1, b2) {
		t.Fatalf("second renewal replaced the state:\n%s\n%s", b1, b2)
	}
	if err := c.Release(tctx(t), "v1", "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if l := acquire(t, c, "v1", coord.AcquireOptions{Wait: 0}); l.Token != 8 {
		t.Fatalf("token %d, want 8", l.Token)
	}
}

// TestReadersDuringRenewals: readers without the lock (Inspect, List, and a
// process waiting) never fail and never see the lease end while it is
// renewed in place as fast as possible.
func TestReadersDuringRenewals(t *testing.T) {
	dir := newDir(t)
	c := openTB(t, dir)
	const ttl = time.Minute
	l := acquire(t, c, "busy", coord.AcquireOptions{TTL: ttl})
	h := spawn(t, nil, "try", dir, "busy", "1s")
	ctx, cancel := context.WithTimeout(tctx(t), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := c.Renew(ctx, "busy", l.ID); err != nil && ctx.Err() == nil {
				t.Errorf("Renew: %v", err)
				return
			}
		}
	}()
	reader := openTB(t, dir)
	for n := 0; ctx.Err() == nil; n++ {
		li, err := reader.Inspect(tctx(t), "busy")
		if err != nil || !li.Held || li.Token != l.Token || li.TTLLeft > ttl {
			t.Fatalf("Inspect during renewals (%d): %+v, %v", n, li, err)
		}
		if n%10 == 0 {
			if ls, err := reader.List(tctx(t), ""); err != nil || len(ls) != 1 || !ls[0].Held {
				t.Fatalf("List during renewals: %+v, %v", ls, err)
			}
		}
	}
	wg.Wait()
	if f := h.expect("error"); !strings.Contains(strings.Join(f, " "), "busy") {
		t.Fatalf("the waiting process: %v", f)
	}
}

// sameButRecord reports whether two state files' bytes differ at most in
// their lease records.
func sameButRecord(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) <= recordOffset+recordLen || string(a[:recordOffset]) != recordPrefix {
		return string(a) == string(b)
	}
	return string(a[:recordOffset]) == string(b[:recordOffset]) &&
		string(a[recordOffset+recordLen:]) == string(b[recordOffset+recordLen:])
}
