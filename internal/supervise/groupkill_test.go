//go:build linux

package supervise_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/clock"
	"github.com/fence-dev/fence/internal/supervise"
	"github.com/fence-dev/fence/pkg/coord"
)

// bgScript is `sh -c 'sleep 201 & sleep 202'` that says who it is: the
// shell and its two sleeps (a background child and a foreground one) write
// their PIDs to $P, three lines in all. The signals take their default
// action.
const bgScript = `echo $$ >> "$P"
sh -c 'echo $$ >> "$P"; exec sleep 201' &
sh -c 'echo $$ >> "$P"; exec sleep 202'`

// TestGroupSignals: a signal sent to fence's whole process group (what
// timeout(1), a supervisor's group kill or a shell's job control sends)
// does not reach the watchdog, which is in a group of its own in fence's
// session. KILL: the watchdog sees its order pipe end and stops the
// command's whole tree at once. STOP: fence is frozen, and the watchdog
// stops the command at its stop time, before the lease can expire.
// TERM: fence forwards it to the command, whose tree dies of it; fence
// exits with its status and releases. In each case a next holder, waiting
// for the lock since the signal, gets it only after every process of the
// old command's tree is dead, on both backends, with and without a cgroup.
func TestGroupSignals(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			for _, m := range modes {
				for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGTERM} {
					t.Run(m.name+"/"+supervise.SignalName(sig), func(t *testing.T) {
						groupSignal(t, b, m.noCgroup, sig)
					})
				}
			}
		})
	}
}

func groupSignal(t *testing.T, b *backend, noCgroup bool, sig syscall.Signal) {
	const ttl = 3 * time.Second
	lock := "group/" + t.Name()
	list := tempPath(t, "pids")
	script, lines := treeScript, treeLines // TERM ignored, every way to leave the group
	if sig == syscall.SIGTERM {
		script, lines = bgScript, 3
	}
	f := startFence(t, b, supervise.Options{Lock: lock, TTL: ttl, Grace: 300 * time.Millisecond,
		Command: []string{script}, Shell: true, NoCgroup: noCgroup, Env: append(os.Environ(), "P="+list)})
	ps := pids(t, waitFile(t, list, lines))
	leader, err := procStat(ps[0])
	if err != nil {
		t.Fatal(err)
	}
	fence := f.cmd.Process.Pid
	wd, err := procStat(leader.PPID)
	if err != nil {
		t.Fatal(err)
	}
	fst, err := procStat(fence)
	if err != nil {
		t.Fatal(err)
	}
	if wd.PPID != fence || wd.PGID == fst.PGID || wd.SID != fst.SID {
		t.Fatalf("watchdog %+v, fence %+v: the watchdog should be fence's child in a process group of its own, in fence's session", wd, fst)
	}
	var deaths []*deathWatch
	for _, pid := range ps {
		deaths = append(deaths, watchDeath(t, pid))
	}
	wdDeath := watchDeath(t, wd.PID)
	time.Sleep(ttl / 3) // let fence renew once and attach the command's group

	if err := syscall.Kill(-fst.PGID, sig); err != nil {
		t.Fatal(err)
	}
	signalled := clock.Now()
	if sig == syscall.SIGSTOP {
		defer syscall.Kill(-fst.PGID, syscall.SIGCONT)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	type acquired struct {
		l   *coord.Lease
		at  clock.Boot
		err error
	}
	next := make(chan acquired, 1)
	go func() {
		l, err := b.c.Acquire(ctx, lock, coord.AcquireOptions{TTL: ttl, Wait: coord.WaitForever, Holder: "next"})
		next <- acquired{l, clock.Now(), err}
	}()
	var a acquired
	select {
	case a = <-next:
	case <-time.After(hang):
		t.Fatal("the next holder did not get the lock")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer b.c.Release(context.Background(), a.l.Name, a.l.ID)
	assertAllDead(t, ps) // when the next holder holds the lock
	var last clock.Boot
	for _, d := range deaths {
		last = max(last, d.wait(t))
	}
	if last >= a.at {
		t.Fatalf("the old command's last process died %v after the next holder got the lock", last.Sub(a.at))
	}
	noteMargin(t, "tree of %d dead %v after SIG%s to fence's group; %v before the next holder got the lock",
		len(ps), last.Sub(signalled).Round(time.Millisecond), supervise.SignalName(sig), a.at.Sub(last).Round(time.Millisecond))

	switch sig {
	case syscall.SIGKILL:
		f.wait(t)
		wdDeath.wait(t)
	case syscall.SIGSTOP:
		if !alive(wd.PID) && wdDeath.wait(t) < last {
			t.Fatal("the watchdog exited before the command's tree was dead")
		}
		if err := syscall.Kill(-fst.PGID, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		f.expectLost(t, "paused")
	case syscall.SIGTERM:
		if code := f.wait(t); code != 128+int(syscall.SIGTERM) {
			t.Fatalf("fence exited %d, want 143; stderr:\n%s", code, f.stderr.String())
		}
		if f.stderr.Len() != 0 {
			t.Fatalf("fence said: %s", f.stderr.String())
		}
	}
}
