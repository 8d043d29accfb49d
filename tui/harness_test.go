package tui

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/muesli/termenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Goldens and screen assertions are plain text.
	lipgloss.SetColorProfile(termenv.Ascii)
	lipgloss.SetHasDarkBackground(true)
	goleak.VerifyTestMain(m,
		// teatest waits for a SIGINT for the life of the process.
		goleak.IgnoreTopFunction("github.com/charmbracelet/x/exp/teatest.NewTestModel.func2"),
	)
}

// harness runs a Model the way a Bubble Tea program does, on the test's
// goroutine: Update gets one message at a time; the commands it returns run
// on their own goroutines and their messages come back through msgs.
type harness struct {
	t    *testing.T
	m    *Model
	ctx  context.Context
	msgs chan tea.Msg
	wg   sync.WaitGroup
}

func newHarness(t *testing.T, c coord.Coordinator, opts Options) *harness {
	t.Helper()
	if opts.Now == nil {
		opts.Now = fixedClock
	}
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	ctx, cancel := context.WithCancel(t.Context())
	h := &harness{t: t, ctx: ctx, msgs: make(chan tea.Msg, 1024)}
	h.m = New(ctx, c, opts)
	t.Cleanup(func() {
		cancel()
		h.wg.Wait()
	})
	h.send(tea.WindowSizeMsg{Width: 80, Height: 24})
	h.run(h.m.Init())
	return h
}

// run executes cmd, and the commands of its batches, in the background.
func (h *harness) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		// A tick or an idle watch would hold the cleanup: stop waiting
		// for them when the test ends.
		done := make(chan tea.Msg, 1)
		go func() { done <- cmd() }()
		var msg tea.Msg
		select {
		case msg = <-done:
		case <-h.ctx.Done():
			return
		}
		switch msg := msg.(type) {
		case nil:
		case tea.BatchMsg:
			for _, c := range msg {
				h.run(c)
			}
		default:
			select {
			case h.msgs <- msg:
			case <-h.ctx.Done():
			}
		}
	}()
}

// send gives msg to Update and runs the command it returns.
func (h *harness) send(msg tea.Msg) tea.Cmd {
	_, cmd := h.m.Update(msg)
	h.run(cmd)
	return cmd
}

// until processes messages until cond holds. The limit only guards against
// a hang; nothing here depends on how fast the machine is.
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	limit := time.After(20 * time.Second)
	for !cond() {
		select {
		case msg := <-h.msgs:
			h.send(msg)
		case <-limit:
			h.t.Fatalf("gave up waiting for %s; screen:\n%s", what, h.m.View())
		}
	}
}

// settle waits until the first list and the history counters of the rows
// on screen are in.
func (h *harness) settle() {
	h.t.Helper()
	h.until("the first list", func() bool { return !h.m.lastOK.IsZero() && h.m.watching && h.m.backend != "" && !h.m.listing })
	h.until("the history counters", func() bool {
		if h.m.hist == nil {
			return true
		}
		for _, r := range h.m.table.Visible(h.m.store) {
			if r.HistAt.IsZero() {
				return false
			}
		}
		return !h.m.histBusy
	})
}

func (h *harness) key(keys ...string) {
	for _, k := range keys {
		h.send(keyMsg(k))
	}
}

func keyMsg(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "backspace":
		return tea.KeyMsg{Type: tea.KeyBackspace}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	case "pgdown":
		return tea.KeyMsg{Type: tea.KeyPgDown}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func (h *harness) screen() []string { return strings.Split(h.m.View(), "\n") }

// lineOf is the screen line showing lock name (its name cut or not), -1
// if none.
func lineOf(screen []string, name string) int {
	for i, l := range screen {
		f := fields(l)
		if len(f) == 0 {
			continue
		}
		if f[0] == name || (strings.HasSuffix(f[0], "…") && strings.HasPrefix(name, strings.TrimSuffix(f[0], "…"))) {
			return i
		}
	}
	return -1
}

// fields splits a table line into its words.
func fields(line string) []string { return strings.Fields(strings.TrimPrefix(line, ">")) }

// checkFrame asserts the frame fills the terminal exactly and no line is
// wider than it.
func checkFrame(t interface {
	Helper()
	Fatalf(string, ...any)
}, view string, w, h int) {
	t.Helper()
	lines := strings.Split(view, "\n")
	if len(lines) != h {
		t.Fatalf("%dx%d: the frame has %d lines:\n%s", w, h, len(lines), view)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Fatalf("%dx%d: line %d is %d cells wide: %q", w, h, i, n, l)
		}
	}
}
