package supervise

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/pkg/clock"
	"github.com/fence-dev/fence/pkg/coord"
)

// The watchdog talks with fence over two pipes, one JSON object per line:
// fence writes orders on the watchdog's fd 3, the watchdog writes reports on
// its fd 4. The end of fd 3 means that fence is gone.

// Orders from fence.
const (
	opStart  = "start"  // Spec: start the command
	opExtend = "extend" // LeaseStop: a later stop time
	opStop   = "stop"   // Reason: run the stop sequence now
	opSignal = "signal" // Signal: forward a signal to the command's group
)

// Reports from the watchdog.
const (
	evStarted   = "started"    // PID, PGID, Cgroup
	evExecError = "exec_error" // Code (126, 127), Msg
	evStopping  = "stopping"   // Reason: the stop signal was sent
	evExited    = "exited"     // Exit
	evError     = "error"      // Msg: the watchdog failed (fence exits 125)
)

// Stop reasons. All but reasonDeadline end in exit code 76.
const (
	reasonLease     = "lease"      // the stop time passed without extension
	reasonLost      = "lost"       // fence reported the lease gone or unsafe
	reasonDeadline  = "deadline"   // --deadline
	reasonFenceGone = "fence_gone" // the pipe from fence closed
	reasonCanceled  = "canceled"   // Run's context ended (exit 125)
)

type order struct {
	Op        string     `json:"op"`
	Spec      *spec      `json:"spec,omitempty"`
	LeaseStop clock.Boot `json:"lease_stop,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Signal    int        `json:"signal,omitempty"`
}

// spec is what the watchdog needs to run the command.
type spec struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// Signal starts the stop sequence, SIGKILL follows after Grace.
	Signal int           `json:"signal"`
	Grace  time.Duration `json:"grace"`
	// LeaseStop is when the stop sequence must start unless extended;
	// Deadline (0: none) when it starts regardless.
	LeaseStop clock.Boot `json:"lease_stop"`
	Deadline  clock.Boot `json:"deadline,omitempty"`
	// Ignore lists signals that fence found ignored when it started (nohup):
	// the command inherits them ignored.
	Ignore []int `json:"ignore,omitempty"`
	// Foreground puts the command's group in the foreground of the
	// terminal on stdin.
	Foreground bool `json:"foreground,omitempty"`
	// FencePgrp is fence's process group, which gets the terminal back
	// when the command ends (the watchdog is in a group of its own).
	FencePgrp int `json:"fence_pgrp,omitempty"`
	// Cgroup asks for a cgroup v2 of its own where the machine allows.
	Cgroup bool `json:"cgroup,omitempty"`
	// End is what the watchdog needs to end the leases itself when fence
	// is gone (Options.Handover); nil: they are left to expire.
	End *endSpec `json:"end,omitempty"`
}

// endSpec is the coordinator's settings (opaque, for the LeaseEnder) and
// the leases to end, in order.
type endSpec struct {
	Coordinator json.RawMessage `json:"coordinator"`
	Leases      []coord.Lease   `json:"leases"`
}

type report struct {
	Ev     string `json:"ev"`
	PID    int    `json:"pid,omitempty"`
	PGID   int    `json:"pgid,omitempty"`
	Cgroup string `json:"cgroup,omitempty"`
	Code   int    `json:"code,omitempty"`
	Msg    string `json:"msg,omitempty"`
	Reason string `json:"reason,omitempty"`
	// At is when the event happened, on the boot clock.
	At   clock.Boot `json:"at,omitempty"`
	Exit *exitInfo  `json:"exit,omitempty"`
}

// exitInfo is how the command ended.
type exitInfo struct {
	// Code is the exit code, or -1 when killed by Signal.
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
	// Stopped is the reason of the stop sequence the watchdog ran, "" when
	// the command ended on its own first.
	Stopped string `json:"stopped,omitempty"`
	// Killed: SIGKILL was needed.
	Killed bool `json:"killed,omitempty"`
	// Died is when the command's main process ended, on the boot clock.
	Died clock.Boot `json:"died"`
}

// orderPipe is the watchdog's end of the order pipe, read without blocking
// by the goroutine that decides: take returns every order fence wrote
// before it was called. A watchdog resumed after a freeze reads the boot
// clock, then takes what fence sent meanwhile (the extensions of a lease
// that fence kept renewing), and only then compares its stop time with
// that reading. A reader goroutine and a channel could not promise that:
// an order read from the pipe but not yet handed over would be missed.
type orderPipe struct {
	fd    int
	buf   []byte
	ended bool
	// ready is signalled when the pipe has something to read (or is at its
	// end); the watcher then waits for again, which every take signals,
	// before it polls once more.
	ready chan struct{}
	again chan struct{}
}

func newOrderPipe(fd int) (*orderPipe, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, err
	}
	p := &orderPipe{fd: fd, ready: make(chan struct{}, 1), again: make(chan struct{}, 1)}
	go p.watch()
	return p, nil
}

func (p *orderPipe) watch() {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n <= 0 {
			continue
		}
		p.ready <- struct{}{}
		if _, ok := <-p.again; !ok {
			return
		}
	}
}

// take reads every order waiting in the pipe; ended reports that fence
// closed it (fence is gone) or wrote a malformed line.
func (p *orderPipe) take() (orders []order, ended bool) {
	if p.ended {
		return nil, true
	}
	var chunk [16 << 10]byte
	eof := false
	for {
		n, err := unix.Read(p.fd, chunk[:])
		if n > 0 {
			p.buf = append(p.buf, chunk[:n]...)
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// n == 0: the end of the pipe; or an error. The orders fence wrote
		// before it died are taken first (its start order among them).
		eof = !errors.Is(err, unix.EAGAIN)
		break
	}
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		var o order
		if err := json.Unmarshal(p.buf[:i], &o); err != nil {
			p.end()
			break
		}
		orders = append(orders, o)
		p.buf = p.buf[i+1:]
	}
	if eof {
		p.end()
	}
	if !p.ended {
		poke(p.again) // the watcher may poll again
	}
	return orders, p.ended
}

func (p *orderPipe) end() {
	if !p.ended {
		p.ended = true
		p.buf = nil
		close(p.again)
	}
}
