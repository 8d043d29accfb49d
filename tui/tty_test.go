package tui

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/syncbuf"
)

// openPTY opens a pseudo-terminal pair: the test holds the master side,
// the dashboard gets the slave as its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the slave: %v", err)
	}
	t.Cleanup(func() {
		slave.Close()
		master.Close()
	})
	return master, slave
}

func setWinsize(t *testing.T, tty *os.File, cols, rows int) {
	t.Helper()
	ws := &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		t.Fatalf("TIOCSWINSZ: %v", err)
	}
}

// TestRunOnARealTerminal runs Run on a pseudo-terminal: Bubble Tea puts it
// in raw mode, reads its size, and, when the size changes and SIGWINCH
// comes (sent here by hand: the pty is not this process's controlling
// terminal, so the kernel sends it to nobody), reads the new size and the
// dashboard lays itself out again. Keys typed on the terminal reach it; q
// ends Run with no error.
func TestRunOnARealTerminal(t *testing.T) {
	master, slave := openPTY(t)
	setWinsize(t, slave, 80, 24)
	out := &syncbuf.Buffer{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(out, master) // ends when the master is closed (EIO)
	}()

	f := newFake(sampleLocks()...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, f, Options{Input: slave, Output: slave, Now: fixedClock, Location: time.UTC})
	}()

	off := 0
	waitFor := func(what string, cond func([]byte) bool) {
		t.Helper()
		var seen []byte
		limit := time.Now().Add(20 * time.Second) // a hang guard only
		for {
			var b []byte
			b, off = out.Since(off)
			seen = append(seen, b...)
			if cond(seen) {
				return
			}
			if time.Now().After(limit) {
				t.Fatalf("no %s on the terminal; it shows:\n%q", what, seen)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// At 80 columns the status bar has no room for the sort.
	waitFor("first frame", func(b []byte) bool {
		return bytes.Contains(b, []byte("6 locks · 4 held · 1 expiring")) && bytes.Contains(b, []byte("billing/reco…"))
	})

	setWinsize(t, slave, 132, 40)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	waitFor("frame at 132x40", func(b []byte) bool {
		return bytes.Contains(b, []byte("sort name")) && bytes.Contains(b, []byte("billing/reconcile "))
	})

	if _, err := master.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("q did not end Run")
	}
	// Run restored the terminal: not raw any more.
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ICANON == 0 || tio.Lflag&unix.ECHO == 0 {
		t.Fatalf("the terminal is left raw: lflag %#x", tio.Lflag)
	}
	slave.Close()
	master.Close()
	<-copied
}

// TestRunEndsWithItsContext: cancelling the context ends Run with no error
// (fence top on SIGTERM).
func TestRunEndsWithItsContext(t *testing.T) {
	master, slave := openPTY(t)
	setWinsize(t, slave, 132, 40)
	out := &syncbuf.Buffer{}
	go io.Copy(out, master)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, newFake(sampleLocks()...), Options{Input: slave, Output: slave}) }()
	// Wait for a frame at the terminal's size: Bubble Tea's first size
	// check, which Run does not wait for, is over.
	limit := time.Now().Add(20 * time.Second)
	for b, _ := out.Since(0); !bytes.Contains(b, []byte("billing/reconcile ")); b, _ = out.Since(0) {
		if time.Now().After(limit) {
			t.Fatalf("no frame at 132 columns:\n%q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}
