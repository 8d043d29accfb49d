// Package tui is fence top, the live dashboard of locks: who holds what,
// with which fencing token, how much of the lease is left, and how often
// renewals failed and stale tokens were refused.
//
// The dashboard reads only through the pkg/coord API: Watch (kept running
// by package follow) keeps the table live, List loads it (and again on
// coord.EventReset and every refresh period), Inspect and, when the
// coordinator implements history.Store, History fill the details and the
// counters; an Inspect of one key every tick is the health probe (see
// probeStall). Every read runs in a tea.Cmd (commands.go), on a goroutine
// of its own; Update and View do no I/O.
//
// Layout after gh-dash: components in tui/components, the one Styles struct
// in tui/styles, the key map in keys.go, the status line in status.go.
package tui

import (
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/follow"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
	"github.com/fence-dev/fence/tui/components/details"
	"github.com/fence-dev/fence/tui/components/locktable"
	"github.com/fence-dev/fence/tui/internal/store"
	"github.com/fence-dev/fence/tui/styles"
)

// DefaultRefresh is how often the dashboard lists every lock again by
// default, besides following the watch.
const DefaultRefresh = 5 * time.Second

// Options configures the dashboard.
type Options struct {
	// Prefix shows only the locks whose names start with it.
	Prefix string
	// Refresh is how often the whole list is read again and the visible
	// rows' history counters refreshed (default DefaultRefresh). The list is
	// the health check and, on etcd, where renewals show (its watch does not
	// report them). Slow lists stretch it, so that reading never takes more
	// than a tenth of the time.
	Refresh time.Duration
	// NoColor draws without colour. NO_COLOR in the environment is honoured
	// anyway when the renderer detects the terminal's colours.
	NoColor bool
	// Renderer draws the styles (nil: Run makes one on Output; New uses
	// lipgloss's default renderer).
	Renderer *lipgloss.Renderer
	// Now is the clock the TTLs count down on and latencies are measured
	// with (default time.Now). Tests fix it to get stable frames.
	Now func() time.Time
	// Location is where times are shown (default time.Local).
	Location *time.Location
	// Warning is shown on the status line while the coordinator answers:
	// a known problem of it (an etcd version with a lease-safety bug).
	Warning string
	// Operator is who the freezes and thaws made with the f and t keys
	// name, "user@host" as fence freeze records it (default: this
	// process's user and host). Their reason is "from fence top by
	// Operator".
	Operator string
	// Input and Output are the terminal for Run (default os.Stdin and
	// os.Stdout).
	Input  io.Reader
	Output io.Writer
}

// Run shows the dashboard on the terminal until the user quits (q, ctrl-c)
// or ctx ends; both return nil. It uses the alternate screen.
func Run(ctx context.Context, c coord.Coordinator, opts Options) error {
	if c == nil {
		return errors.New("fence top: no coordinator")
	}
	popts := []tea.ProgramOption{tea.WithAltScreen()}
	if opts.Input != nil {
		popts = append(popts, tea.WithInput(opts.Input))
	}
	if opts.Output != nil {
		popts = append(popts, tea.WithOutput(opts.Output))
	}
	if opts.Renderer == nil {
		opts.Renderer = lipgloss.NewRenderer(cmp.Or[io.Writer](opts.Output, os.Stdout))
	}
	// Ask the terminal for its background (lipgloss's adaptive colours)
	// now, before Bubble Tea reads the input that carries the answer.
	opts.Renderer.HasDarkBackground()
	m := New(ctx, c, opts)
	defer m.stop()
	p := tea.NewProgram(m, popts...)
	// The end of ctx quits as q does, so the terminal is restored the
	// same way (tea.WithContext would kill the program instead).
	defer context.AfterFunc(ctx, p.Quit)()
	_, err := p.Run()
	return err
}

type mode int

const (
	modeTable mode = iota
	modeDetails
	modeHelp
)

// Model is the dashboard, a tea.Model. Create it with New.
type Model struct {
	ctx    context.Context
	stop   context.CancelFunc
	c      coord.Coordinator
	hist   history.Store // nil when the coordinator keeps no history
	opts   Options
	styles *styles.Styles
	keys   keyMap

	help    help.Model
	filter  textinput.Model
	table   locktable.Model
	details details.Model
	store   *store.Store

	width, height int
	now           time.Time
	mode          mode
	helpFrom      mode      // the screen the help was opened from
	filtering     bool      // typing a filter
	asking        *question // before a revoke, a freeze or a thaw
	changing      bool      // a revoke, a freeze or a thaw is on its way
	flash         string
	flashErr      bool
	flashUntil    time.Time

	backend string
	totals  store.Totals // counted after each change, not in each frame

	// The watch (package follow starts it again when it fails).
	events   <-chan follow.Event
	watchErr error
	watching bool

	// The full list.
	listing   bool
	relist    bool          // list again when the current list returns
	pending   []coord.Event // events seen while a list is on its way
	lastList  time.Time
	listEvery time.Duration

	// Health of the reads.
	readErr    error
	latency    time.Duration // of the last read answered
	lastOK     time.Time     // when it was answered
	probeStart time.Time     // when the inspect of probeName on its way was asked

	// History counters: one batch at a time.
	histBusy  bool
	lastBatch time.Duration

	inspecting map[string]bool // the locks an inspect is on its way for

	detailsBusy  bool
	detailsDirty bool
	detailsAt    time.Time
}

// New returns the dashboard model for c. It reads nothing until the Bubble
// Tea program runs its Init; ctx ends its reads and its watch.
func New(ctx context.Context, c coord.Coordinator, opts Options) *Model {
	if ctx == nil {
		ctx = context.Background()
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Location = cmp.Or(opts.Location, time.Local)
	opts.Operator = cmp.Or(opts.Operator, config.DefaultSetter())
	r := cmp.Or(opts.Renderer, lipgloss.DefaultRenderer())
	if opts.NoColor {
		r = lipgloss.NewRenderer(io.Discard)
		r.SetColorProfile(termenv.Ascii)
	}
	st := styles.New(r)
	ctx, cancel := context.WithCancel(ctx)
	m := &Model{
		ctx:        ctx,
		stop:       cancel,
		c:          c,
		opts:       opts,
		styles:     st,
		keys:       defaultKeys(),
		table:      locktable.New(st),
		details:    details.New(st, opts.Location),
		store:      store.New(),
		now:        opts.Now(),
		backend:    c.Describe(),
		listEvery:  opts.Refresh,
		inspecting: make(map[string]bool),
	}
	m.hist, _ = c.(history.Store)
	m.table.NoHistory = m.hist == nil
	m.details.NoHistory = m.hist == nil

	m.help = help.New()
	m.help.Styles = st.Help
	m.filter = textinput.New()
	m.filter.Prompt = "/"
	m.filter.PromptStyle = st.Accent
	m.filter.Placeholder = "name or holder"
	m.filter.PlaceholderStyle = st.Dim
	m.filter.TextStyle = r.NewStyle()
	m.filter.Cursor.Style = r.NewStyle()
	m.filter.Cursor.TextStyle = r.NewStyle()
	m.filter.Cursor.SetMode(cursor.CursorStatic) // no blink ticks
	m.setSize(80, 24)
	return m
}

const (
	// sweepBatch is how many locks' histories one command reads.
	sweepBatch = 256
	// maxPending bounds the events kept while a list is on its way.
	maxPending = 100_000
	// maxInspect bounds the inspects on their way: the probe and the
	// expiring rows re-read.
	maxInspect = 9
	flashFor   = 5 * time.Second
	// tickEvery is how often the clock ticks: TTLs count down, the probe
	// is sent.
	tickEvery = time.Second
)

// Init starts the reads: the watch (then the list), and the clock.
func (m *Model) Init() tea.Cmd {
	m.events = follow.Watch(m.ctx, m.c, m.opts.Prefix)
	return tea.Batch(m.nextEventsCmd(), m.after(tickEvery, tickMsg{}))
}
