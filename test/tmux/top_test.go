// Package tmux is the end-to-end test of fence top: the real fence binary
// shows the dashboard in a tmux pane (120x40, TERM=xterm-256color) against a
// real coordinator, the local backend and an etcd server embedded in the
// test process, while real `fence run` processes come and go. The test
// types keys with send-keys and reads the screen with capture-pane.
//
// It is skipped when tmux is not installed, unless FENCE_REQUIRE_TMUX is
// set (CI sets it); then it fails.
package tmux

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/etcdbugs"
	"github.com/fence-dev/fence/internal/etcdtest"
)

const (
	cols, rows = 120, 40
	// hangGuard bounds every wait. It only turns a hang into a failure;
	// nothing here asserts how fast something happens.
	hangGuard = 20 * time.Second
	// poll is how often the screen is read while waiting for it.
	poll = 50 * time.Millisecond
)

// The fence binary, built once for every test of this package.
var build struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// fenceBinary builds cmd/fence (once) as `go build ./cmd/fence` does,
// without tags and alone in its directory (fence top is in it), and returns
// its path.
func fenceBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		gotool, err := exec.LookPath("go")
		if err != nil {
			build.err = fmt.Errorf("the go command is needed to build fence: %w", err)
			return
		}
		start := time.Now()
		defer func() { t.Logf("built fence in %v", time.Since(start).Round(time.Millisecond)) }()
		if build.dir, build.err = os.MkdirTemp("", "fence-tmux-"); build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "fence")
		out, err := exec.Command(gotool, "build", "-o", build.path, "github.com/fence-dev/fence/cmd/fence").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build ./cmd/fence: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

func requireTmux(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("FENCE_REQUIRE_TMUX") != "" {
			t.Fatalf("FENCE_REQUIRE_TMUX is set but tmux is not installed: %v", err)
		}
		t.Skip("tmux is not installed (set FENCE_REQUIRE_TMUX to fail instead)")
	}
}

// backend is where the coordinator of a pass is.
type backend struct {
	env      []string // FENCE_STATE_DIR or FENCE_ENDPOINTS
	describe string   // how the status bar names it (its start)
	// warning: the known problem the status line names beside "● ok"
	// (a server version's lease-safety bug); "" for none.
	warning string
	// freeStays: a released lock stays listed, free (the local backend
	// keeps each lock's token counter); on etcd it leaves the list.
	freeStays bool
	// anonWaiters: the details name a waiter without a lease or a PID
	// (PostgreSQL knows neither).
	anonWaiters bool
}

// TestTopLocal runs the scenario on the local coordinator.
func TestTopLocal(t *testing.T) {
	requireTmux(t)
	t.Parallel() // the passes mostly wait for commands and renewals
	dir := filepath.Join(t.TempDir(), "state")
	runScenario(t, backend{env: []string{"FENCE_STATE_DIR=" + dir}, describe: " local /", freeStays: true})
}

// TestTopEtcd runs the scenario on a real etcd, embedded in this test
// process; the fence processes reach it through FENCE_ENDPOINTS.
func TestTopEtcd(t *testing.T) {
	requireTmux(t)
	t.Parallel()
	srv := etcdtest.Start(t)
	b := backend{env: []string{"FENCE_ENDPOINTS=" + srv.Endpoints()[0]}, describe: " etcd 127.0.0.1:"}
	if len(etcdbugs.BugsOf(version.Version)) > 0 {
		b.warning = "● ok ▲ lease bug etcd#"
	}
	runScenario(t, b)
}

// runScenario: fence top starts on an empty coordinator; holders arrive,
// one waiter queues behind a holder, a short run comes and goes; the test
// filters, sorts, opens the help and the details (which name the waiter),
// freezes the lock with f (its row reads "frozen"), revokes the held lease
// (its fence run exits 76; the waiter, held back, is named in the details
// beside the freeze), sees a prefix frozen with fence freeze on its lock,
// thaws the lock with t (the waiter takes over with a larger token), quits
// with q, and checks that fence top exited 0 and left the terminal as it
// found it.
func runScenario(t *testing.T, b backend) {
	s := &scenario{t: t, bin: fenceBinary(t), dir: t.TempDir()}
	s.env = baseEnv(s.dir, b.env)
	p := s.startTop()

	p.waitFor("the first frame on an empty coordinator", func(scr string) bool {
		return strings.Contains(scr, "● ok") && strings.Contains(scr, "0 locks · 0 held · 0 expiring") &&
			strings.HasPrefix(statusLine(scr), b.describe) &&
			(b.warning == "" || strings.Contains(statusLine(scr), b.warning))
	})
	if b.warning == "" && strings.Contains(statusLine(p.screen()), "▲") {
		t.Errorf("a warning on the status line of a coordinator without a known problem: %q", statusLine(p.screen()))
	}
	if scr := p.screenANSI(); !colour.MatchString(scr) {
		t.Errorf("no colour on an xterm-256color terminal:\n%q", scr)
	}

	// Holders arrive.
	s.start("reporter", "run", "reports/daily", "--holder", "reporter", "--ttl", "30s", "--", "sleep", "120")
	first := s.start("b-first", "run", "jobs/b", "--holder", "b-first", "--ttl", "6s", "--", "sleep", "120")
	p.waitFor("both holders", func(scr string) bool {
		return hasRow(scr, "reports/daily", "reporter") && hasRow(scr, "jobs/b", "b-first") &&
			strings.Contains(scr, "2 locks · 2 held · 0 expiring")
	})
	// b-first holds jobs/b (the screen says so): this one waits behind it.
	waiter := s.start("b-second", "run", "jobs/b", "--holder", "b-second", "--ttl", "6s", "--", "sleep", "2")
	p.waitFor("the waiter", func(scr string) bool {
		return strings.Contains(scr, "2 locks · 2 held · 0 expiring · 1 waiting")
	})

	// A short run comes and goes.
	brief := s.start("a-brief", "run", "jobs/a", "--holder", "a-brief", "--ttl", "3s", "--", "sleep", "2")
	threeHeld := regexp.MustCompile(`3 locks · 3 held · \d+ expiring`) // a 3s lease may show expiring
	p.waitFor("jobs/a held by a-brief", func(scr string) bool {
		return hasRow(scr, "jobs/a", "a-brief") && threeHeld.MatchString(scr)
	})
	if code := brief.wait(t); code != 0 {
		t.Fatalf("fence run jobs/a exited %d, want 0; stderr: %s", code, brief.stderr())
	}
	if b.freeStays {
		free := regexp.MustCompile(`(?m)^[> ] jobs/a +free +- `)
		p.waitFor("jobs/a free", func(scr string) bool {
			return free.MatchString(scr) &&
				strings.Contains(scr, "3 locks · 2 held · 0 expiring · 1 waiting")
		})
	} else {
		p.waitFor("jobs/a gone", func(scr string) bool {
			return !strings.Contains(scr, "jobs/a") && strings.Contains(scr, "2 locks · 2 held · 0 expiring · 1 waiting")
		})
	}

	// "/" filters: type a name, enter keeps it.
	p.send("/")
	p.waitFor("the filter input", func(scr string) bool { return strings.HasPrefix(lastLine(scr), "/") })
	p.typeText("jobs/b")
	p.waitFor("the typed filter", func(scr string) bool { return strings.TrimSpace(lastLine(scr)) == "/jobs/b" })
	p.send("Enter")
	p.waitFor("the filtered table", func(scr string) bool {
		return strings.Contains(statusLine(scr), "1 shown · ") && hasRow(scr, "jobs/b", "b-first") &&
			!strings.Contains(scr, "reports/daily") && strings.HasPrefix(lastLine(scr), "/jobs/b (esc clears)")
	})

	// "s" cycles the sort: name, then state.
	if !strings.Contains(statusLine(p.screen()), "sort name") {
		t.Fatalf("the table is not sorted by name at first:\n%s", p.screen())
	}
	p.send("s")
	p.waitFor("the sort by state", func(scr string) bool {
		return strings.Contains(statusLine(scr), "sort state") && strings.Contains(firstLine(scr), "STATE▾")
	})

	// "?" shows the keys; esc goes back to the table.
	p.send("?")
	p.waitFor("the help", func(scr string) bool {
		return strings.Contains(scr, "enter details") && strings.Contains(scr, "r revoke") &&
			strings.Contains(scr, "f freeze") && strings.Contains(scr, "t thaw") &&
			strings.Contains(scr, "columns") && strings.Contains(scr, "STALE  stale tokens refused")
	})
	p.send("Escape")
	p.waitFor("the table again", func(scr string) bool {
		return strings.Contains(firstLine(scr), "STATE▾") && hasRow(scr, "jobs/b", "b-first")
	})

	// enter opens the details of the selected lock: its holder, and who
	// waits for it.
	token := s.token("jobs/b", "b-first")
	p.send("Enter")
	details := regexp.MustCompile(`(?m)^ +holder +b-first +token +` + strconv.FormatUint(token, 10) + `\s`)
	waiterID := `, (?:lease [0-9a-f]+|pid [0-9]+)`
	if b.anonWaiters {
		waiterID = ""
	}
	queued := regexp.MustCompile(`(?m)^  queue +1\. b-second, waiting \S+ \(since [0-9:]{8}\)` + waiterID + ` *$`)
	p.waitFor("the details of jobs/b, naming its waiter", func(scr string) bool {
		return strings.HasPrefix(firstLine(scr), "  jobs/b ") && details.MatchString(scr) && queued.MatchString(scr)
	})
	p.send("Escape")
	p.waitFor("the table again", func(scr string) bool { return strings.Contains(firstLine(scr), "STATE▾") })

	// "f" asks, "y" freezes jobs/b: its row reads "frozen", and its holder
	// runs on.
	p.send("f")
	p.waitContains("Freeze jobs/b (no new holder until thawed; a holder runs on)? [y/N]")
	p.send("y")
	p.waitContains(`froze lock "jobs/b"`)
	frozenRow := regexp.MustCompile(`(?m)^[> ] jobs/b +frozen +b-first +` + strconv.FormatUint(token, 10) + ` `)
	p.waitFor("jobs/b frozen, b-first holding", func(scr string) bool { return frozenRow.MatchString(scr) })
	if st := s.output("status", "jobs/b"); !strings.Contains(st, "limit:") || !strings.Contains(st, "frozen by ") {
		t.Fatalf("fence status after the freeze key:\n%s", st)
	}

	// "r" asks, "y" revokes; the fence run holding the lease stops its
	// command and exits 76. The lock is frozen: the waiter keeps waiting.
	p.send("r")
	p.waitContains(fmt.Sprintf("Revoke the lease on jobs/b (holder b-first, token %d)? [y/N]", token))
	p.send("y")
	p.waitContains(fmt.Sprintf("revoked jobs/b: token %d of b-first", token))
	if code := first.wait(t); code != 76 {
		t.Fatalf("the revoked fence run exited %d, want 76; stderr: %s", code, first.stderr())
	}
	frozenFree := regexp.MustCompile(`(?m)^[> ] jobs/b +frozen +- `)
	p.waitFor("jobs/b frozen with nobody holding, 1 waiting", func(scr string) bool {
		return frozenFree.MatchString(scr) && strings.Contains(statusLine(scr), "1 waiting")
	})
	// The details name the freeze and the waiter held back.
	p.send("Enter")
	limitLine := regexp.MustCompile(`(?m)^  limit +frozen \(this lock\) by \S+@\S+ at [0-9: -]+: from fence top by \S+@\S+ *$`)
	p.waitFor("the details of frozen jobs/b", func(scr string) bool {
		return strings.HasPrefix(firstLine(scr), "  jobs/b ") && strings.HasSuffix(strings.TrimSpace(firstLine(scr)), "frozen") &&
			limitLine.MatchString(scr) && queued.MatchString(scr)
	})
	t.Logf("the details of a frozen lock with a waiter:\n%s", p.screen())
	p.send("Escape")
	p.waitFor("the table again", func(scr string) bool { return strings.Contains(firstLine(scr), "STATE▾") })

	// A prefix frozen from the command line shows at once, without the
	// filter.
	p.send("Escape")
	p.waitFor("the filter cleared", func(scr string) bool { return strings.Contains(scr, "reports/daily") })
	s.output("freeze", "--under", "reports/", "--reason", "INC-7: storage degraded")
	reportsFrozen := regexp.MustCompile(`(?m)^[> ] reports/daily +frozen +reporter `)
	p.waitFor("reports/daily frozen by its prefix", func(scr string) bool { return reportsFrozen.MatchString(scr) })
	t.Logf("the dashboard with a frozen prefix and a frozen lock:\n%s", p.screen())
	s.output("thaw", "--under", "reports/")
	p.waitFor("reports/daily thawed", func(scr string) bool { return hasRow(scr, "reports/daily", "reporter") })

	// "t" asks, "y" thaws jobs/b: the waiter takes the lock over.
	p.send("t")
	p.waitFor("the thaw question", func(scr string) bool {
		return regexp.MustCompile(`Thaw jobs/b \(frozen by \S+@\S+\)\? \[y/N\]`).MatchString(lastLine(scr))
	})
	p.send("y")
	p.waitContains(`thawed lock "jobs/b"`)
	p.waitFor("b-second holding jobs/b with a larger token", func(scr string) bool {
		m := rowRe("jobs/b", "b-second").FindStringSubmatch(scr)
		if m == nil {
			return false
		}
		n, err := strconv.ParseUint(m[1], 10, 64)
		return err == nil && n > token
	})
	if code := waiter.wait(t); code != 0 {
		t.Fatalf("the waiter exited %d, want 0; stderr: %s", code, waiter.stderr())
	}

	// "q" quits: exit 0, and the terminal is as it was.
	p.send("q")
	s.checkExit(p, "q")
}

// checkExit waits for fence top to exit (how: "q", "SIGTERM") and checks
// that it exited 0 and gave the terminal back as it found it: the normal
// screen, the cursor shown, the same terminal settings.
func (s *scenario) checkExit(p *pane, how string) {
	t := s.t
	t.Helper()
	exited := regexp.MustCompile(`(?m)^fence top exited (\d+)$`)
	scr := p.waitFor("fence top to exit", func(scr string) bool { return exited.MatchString(scr) })
	if code := exited.FindStringSubmatch(scr)[1]; code != "0" {
		t.Errorf("fence top exited %s after %s, want 0", code, how)
	}
	if strings.Contains(scr, "● ok") || strings.Contains(scr, "NAME") {
		t.Errorf("the dashboard is left on the screen after %s:\n%s", how, scr)
	}
	if got := p.format("#{alternate_on} #{cursor_flag}"); got != "0 1" {
		t.Errorf("after %s: alternate screen, cursor shown = %q, want \"0 1\"", how, got)
	}
	before, after := s.read("stty.before"), s.read("stty.after")
	if before == "" || before != after {
		t.Errorf("after %s the terminal settings changed: before %q, after %q", how, before, after)
	}
}

// colour matches an SGR sequence that sets a foreground colour.
var colour = regexp.MustCompile(`\x1b\[(?:[0-9]+;)*(?:3[0-7]|38|9[0-7])[;m]`)

// TestTopNoColorAndSignals: with NO_COLOR set the dashboard draws no
// colour (without it, it does: see runScenario); SIGTERM, SIGINT (both
// Bubble Tea's) and SIGHUP (fence's) end it as q does: exit 0, the
// terminal restored.
func TestTopNoColorAndSignals(t *testing.T) {
	requireTmux(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			s := &scenario{t: t, bin: fenceBinary(t), dir: t.TempDir()}
			s.env = append(baseEnv(s.dir, []string{"FENCE_STATE_DIR=" + filepath.Join(s.dir, "state")}), "NO_COLOR=1")
			s.start("reporter", "run", "reports/daily", "--holder", "reporter", "--ttl", "30s", "--", "sleep", "120")
			p := s.startTop()
			p.waitFor("the first frame", func(scr string) bool {
				return hasRow(scr, "reports/daily", "reporter") && strings.Contains(scr, "1 lock · 1 held · 0 expiring")
			})
			if scr := p.screenANSI(); colour.MatchString(scr) {
				t.Errorf("NO_COLOR is set, yet the dashboard has colours:\n%q", scr)
			}
			if err := syscall.Kill(p.top(), sig); err != nil {
				t.Fatal(err)
			}
			s.checkExit(p, unix.SignalName(sig))
		})
	}
}

// TestTopNeedsATerminal: with stdout not a terminal fence top refuses to
// start, exit 125, one line.
func TestTopNeedsATerminal(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(fenceBinary(t), "top")
	cmd.Env = baseEnv(dir, []string{"FENCE_STATE_DIR=" + filepath.Join(dir, "state")})
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("fence top with stdout piped: %v, want exit 125", err)
	}
	if want := "fence: fence top needs a terminal; use fence list --watch\n"; stderr.String() != want || stdout.Len() != 0 {
		t.Fatalf("stdout %q, stderr %q; want nothing and %q", stdout.String(), stderr.String(), want)
	}
}

// scenario is one pass: the fence binary, its environment and the
// processes it started.
type scenario struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

// baseEnv is the test's environment without FENCE_ variables, anything of
// an enclosing tmux, NO_COLOR or CI, with the configuration and state kept in
// dir, TERM=xterm-256color, and the backend's variables.
func baseEnv(dir string, backend []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "FENCE_"), strings.HasPrefix(k, "TMUX"), k == "NO_COLOR", k == "TERM",
			k == "XDG_CONFIG_HOME", k == "XDG_STATE_HOME",
			k == "CI": // termenv draws no colour at all when CI is set
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "TERM=xterm-256color",
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_STATE_HOME="+filepath.Join(dir, "xdg-state"))
	return append(env, backend...)
}

func (s *scenario) read(name string) string {
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		s.t.Errorf("%v", err)
	}
	return strings.TrimSpace(string(b))
}

// token reads the live holder's token with fence status.
// output runs fence with args to completion and returns its stdout,
// failing the test on a non-zero exit.
func (s *scenario) output(args ...string) string {
	s.t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = s.env
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		s.t.Fatalf("fence %v: %v: %s", args, err, stderr)
	}
	return string(out)
}

func (s *scenario) token(lock, holder string) uint64 {
	s.t.Helper()
	cmd := exec.Command(s.bin, "status", lock, "-o", "json")
	cmd.Env = s.env
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("fence status %s: %v", lock, err)
	}
	var v struct {
		Holder *string
		Token  *uint64
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Holder == nil || v.Token == nil || *v.Holder != holder {
		s.t.Fatalf("fence status %s: %s (%v), want held by %s", lock, out, err, holder)
	}
	return *v.Token
}

// proc is a fence process started by the test.
type proc struct {
	name    string
	cmd     *exec.Cmd
	errPath string
	done    chan struct{}
	code    int
}

// start starts fence with args; the test's end stops it (SIGTERM, then
// SIGKILL) if it still runs.
func (s *scenario) start(name string, args ...string) *proc {
	s.t.Helper()
	p := &proc{name: name, errPath: filepath.Join(s.dir, name+".stderr"), done: make(chan struct{})}
	stderr, err := os.Create(p.errPath)
	if err != nil {
		s.t.Fatal(err)
	}
	defer stderr.Close()
	p.cmd = exec.Command(s.bin, args...)
	p.cmd.Env = s.env
	p.cmd.Stderr = stderr // a file: Wait does not wait for the command's children
	if err := p.cmd.Start(); err != nil {
		s.t.Fatalf("start fence %v: %v", args, err)
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode() // -1 when killed by a signal
		default:
			p.code = -2
		}
		close(p.done)
	}()
	s.t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		p.cmd.Process.Signal(syscall.SIGTERM) // fence stops its command and releases
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill() // the watchdog then kills the command's group
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(hangGuard):
		t.Fatalf("fence run (%s) did not exit; stderr: %s", p.name, p.stderr())
		return 0
	}
}

func (p *proc) stderr() string {
	b, _ := os.ReadFile(p.errPath)
	return strings.TrimSpace(string(b))
}

// pane is the tmux pane fence top runs in, on a tmux server of its own.
type pane struct {
	t      *testing.T
	args   []string // -S socket -f config
	env    []string
	target string
}

// startTop starts a tmux server with one 120x40 pane running a shell that
// saves the terminal's settings, runs fence top, saves them again, says how
// fence top exited and waits (the pane's state is read then). Should the
// shell end, the pane stays for capture-pane (remain-on-exit). (The pane's
// own exit status is not used: tmux 3.3 at times reports a dead pane with
// none.)
func (s *scenario) startTop() *pane {
	t := s.t
	conf := filepath.Join(s.dir, "tmux.conf")
	err := os.WriteFile(conf, []byte(strings.Join([]string{
		"set -g status off",
		"set -g remain-on-exit on",
		"set -g default-terminal xterm-256color",
		"set -g default-shell /bin/sh",
		"",
	}, "\n")), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p := &pane{
		t: t,
		// A server of its own, on a socket that goes with the test's
		// temporary directory.
		args:   []string{"-S", filepath.Join(s.dir, "tmux.sock"), "-f", conf},
		env:    s.env,
		target: "top",
	}
	q := func(path string) string { return "'" + path + "'" } // temp paths hold no quote
	script := fmt.Sprintf(`stty -g >%s; %s top --refresh 1s; code=$?; stty -g >%s; echo "fence top exited $code"; read _`,
		q(filepath.Join(s.dir, "stty.before")), q(s.bin), q(filepath.Join(s.dir, "stty.after")))
	p.tmux("new-session", "-d", "-s", p.target, "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), script)
	shell, _ := strconv.Atoi(p.format("#{pane_pid}"))
	t.Cleanup(func() {
		procs := append(descendants(shell), shell)
		cmd := exec.Command("tmux", append(p.args, "kill-server")...)
		cmd.Env = p.env
		cmd.Run() // SIGHUP to the pane: fence top ends as on q
		// The pane's processes are not the test's children: wait for them
		// to go, as a check that nothing is left running.
		for _, pid := range procs {
			waitGone(t, pid)
		}
	})
	if got := p.format("#{pane_width}x#{pane_height}"); got != fmt.Sprintf("%dx%d", cols, rows) {
		t.Fatalf("the pane is %s, want %dx%d", got, cols, rows)
	}
	return p
}

// tmux runs a tmux command on the pane's server and returns its output.
func (p *pane) tmux(args ...string) string {
	p.t.Helper()
	cmd := exec.Command("tmux", append(p.args, args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen reads the pane's screen (text only, no attributes).
func (p *pane) screen() string { return p.tmux("capture-pane", "-p", "-t", p.target) }

// screenANSI reads the pane's screen with its colours and attributes as
// escape sequences.
func (p *pane) screenANSI() string { return p.tmux("capture-pane", "-p", "-e", "-t", p.target) }

// top returns the PID of the fence top running in the pane.
func (p *pane) top() int {
	p.t.Helper()
	shell, _ := strconv.Atoi(p.format("#{pane_pid}"))
	for _, pid := range descendants(shell) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), "top\x00--refresh") {
			return pid
		}
	}
	p.t.Fatalf("no fence top process under the pane's shell %d", shell)
	return 0
}

// format expands a tmux format for the pane.
func (p *pane) format(f string) string {
	return strings.TrimSpace(p.tmux("display-message", "-p", "-t", p.target, f))
}

// send sends keys by their tmux names ("Enter", "Escape", "q").
func (p *pane) send(keys ...string) {
	p.t.Helper()
	p.tmux(append([]string{"send-keys", "-t", p.target}, keys...)...)
}

// typeText types s literally.
func (p *pane) typeText(s string) {
	p.t.Helper()
	p.tmux("send-keys", "-t", p.target, "-l", s)
}

// waitFor reads the screen until ok accepts it and returns that screen.
func (p *pane) waitFor(what string, ok func(screen string) bool) string {
	p.t.Helper()
	start := time.Now()
	deadline := start.Add(hangGuard)
	for {
		scr := p.screen()
		if ok(scr) {
			p.t.Logf("saw %s after %v", what, time.Since(start).Round(time.Millisecond))
			return scr
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waiting for %s: the screen shows:\n%s", what, strings.TrimRight(scr, " \n"))
		}
		time.Sleep(poll)
	}
}

func (p *pane) waitContains(s string) string {
	p.t.Helper()
	return p.waitFor(fmt.Sprintf("%q", s), func(scr string) bool { return strings.Contains(scr, s) })
}

func lines(scr string) []string { return strings.Split(strings.TrimRight(scr, "\n"), "\n") }

func firstLine(scr string) string { return lines(scr)[0] }

// lastLine is the bottom line: keys, the filter, a message or a question.
func lastLine(scr string) string {
	l := lines(scr)
	if len(l) < rows {
		return "" // capture-pane drops trailing empty lines: not the dashboard
	}
	return l[rows-1]
}

// statusLine is the line above the bottom one.
func statusLine(scr string) string {
	l := lines(scr)
	if len(l) < rows {
		return ""
	}
	return l[rows-2]
}

// rowRe matches a table row of lock held by holder; its group is the token.
func rowRe(lock, holder string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^[> ] ` + regexp.QuoteMeta(lock) + ` +(?:held|expiring) +` + regexp.QuoteMeta(holder) + ` +(\d+) `)
}

func hasRow(scr, lock, holder string) bool { return rowRe(lock, holder).MatchString(scr) }

// descendants returns the processes below pid, from /proc.
func descendants(pid int) []int {
	if pid <= 0 {
		return nil
	}
	parent := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := ppid(child); pp > 0 {
			parent[pp] = append(parent[pp], child)
		}
	}
	var out []int
	for todo := parent[pid]; len(todo) > 0; {
		c := todo[0]
		todo = append(todo[1:], parent[c]...)
		out = append(out, c)
	}
	return out
}

// ppid and state of a process from /proc/PID/stat ("pid (comm) S ppid ...").
func stat(pid int) (state byte, ppid int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid
}

func ppid(pid int) int { _, pp := stat(pid); return pp }

// waitGone waits for pid to end (or be a zombie), then kills it and fails.
func waitGone(t *testing.T, pid int) {
	if pid <= 0 {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, _ := stat(pid); st == 0 || st == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d of the tmux pane still runs after kill-server; killed it", pid)
			return
		}
		time.Sleep(poll)
	}
}
