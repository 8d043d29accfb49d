package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startProc starts argv with the harness's environment, its output to w.
// It dies with the harness (Pdeathsig), so a failed run leaves no process.
func startProc(cfg *config, argv []string, w io.Writer) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cfg.env
	cmd.Dir = cfg.work
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// waitProcs waits for every cmd, killing them all when timeout passes, and
// returns the first failure.
func waitProcs(cmds []*exec.Cmd, timeout time.Duration) error {
	errc := make(chan error, len(cmds))
	for _, c := range cmds {
		go func() {
			err := c.Wait()
			if err != nil {
				err = fmt.Errorf("%s: %w", strings.Join(c.Args, " "), err)
			}
			errc <- err
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var first error
	for range cmds {
		select {
		case err := <-errc:
			if err != nil && first == nil {
				first = err
			}
		case <-timer.C:
			for _, c := range cmds {
				_ = c.Process.Kill()
			}
			if first == nil {
				first = fmt.Errorf("processes still running after %v", timeout)
			}
			timer.Reset(time.Hour)
		}
	}
	return first
}

// killProcs kills and reaps cmds (for error paths).
func killProcs(cmds []*exec.Cmd) {
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
	for _, c := range cmds {
		_ = c.Wait()
	}
}

// stampEvent is one line written by bench/cmd/stamp.
type stampEvent struct {
	Start bool  // "S" (else "E")
	T     int64 // CLOCK_BOOTTIME, ns
	PID   int
}

func readStamps(path string) ([]stampEvent, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []stampEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 || (fs[0] != "S" && fs[0] != "E") {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		t, err1 := strconv.ParseInt(fs[1], 10, 64)
		pid, err2 := strconv.Atoi(fs[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		evs = append(evs, stampEvent{Start: fs[0] == "S", T: t, PID: pid})
	}
	return evs, sc.Err()
}

// waitFor polls cond every 5ms until it is true, an error, or timeout.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitStarts waits until path holds n start stamps.
func waitStarts(ctx context.Context, path string, n int, timeout time.Duration) error {
	return waitFor(ctx, timeout, fmt.Sprintf("%d start stamp(s) in %s", n, path), func() (bool, error) {
		evs, err := readStamps(path)
		if err != nil {
			return false, err
		}
		k := 0
		for _, e := range evs {
			if e.Start {
				k++
			}
		}
		return k >= n, nil
	})
}

// release opens the FIFO a holding stamp waits on, which lets it end.
func release(fifo string) error {
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// children returns the PIDs of pid's children (of every thread: a Go
// program forks from whichever thread runs the goroutine).
func children(pid int) []int {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// rssKiB reads VmRSS of pid, in KiB.
func rssKiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
