package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/syncbuf"
)

// Two unprivileged users of one group share a local state directory (2770,
// the group's), as cron jobs of root and www-data would. Run as root, with
// the fence processes under SysProcAttr.Credential (no users or groups are
// added to the system).
const (
	sharedGID = 50400
	user1UID  = 50401
	user2UID  = 50402
	otherUID  = 50403 // not in the group
)

// asUser is fence, as uid (primary group gid, also a member of groups),
// with env, ready to start.
func asUser(t *testing.T, bin string, env []string, uid, gid int, groups []uint32, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups},
		Setpgid:    true, Pdeathsig: syscall.SIGKILL,
	}
	return cmd
}

// TestSharedStateDirTwoUsers: a state directory created as
// `install -d -m 2770 -g G` is used by two members of G: one waits for the
// other's lock (and -n sees it busy), every file is the group's, 0660, every
// directory 2770. A user outside the group, and a world-writable directory,
// are refused with exit 125 and one line saying how to set it up.
func TestSharedStateDirTwoUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test runs fence as two other users (SysProcAttr.Credential)")
	}
	// A tree the unprivileged users can reach: the binary and a marker
	// directory of their own (0777), the state directory 2770 of the group.
	top, err := os.MkdirTemp("", "fence-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(top, 0o755))
	bin := filepath.Join(top, "fence")
	b, err := os.ReadFile(fenceBin)
	must(err)
	must(os.WriteFile(bin, b, 0o755))
	marks := filepath.Join(top, "marks")
	must(os.Mkdir(marks, 0o777))
	must(os.Chmod(marks, 0o777))
	cfg := filepath.Join(top, "config")
	must(os.Mkdir(cfg, 0o755))
	state := filepath.Join(top, "state")
	if out, err := exec.Command("install", "-d", "-m", "2770", "-g", strconv.Itoa(sharedGID), state).CombinedOutput(); err != nil {
		t.Fatalf("install -d: %v: %s", err, out)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + top, "XDG_CONFIG_HOME=" + cfg, "FENCE_STATE_DIR=" + state}
	group := []uint32{sharedGID}

	// user1 holds the lock for a second; user2 finds it busy, then waits
	// for it.
	stamp := func(name string) string {
		return `date +%s.%N > ` + filepath.Join(marks, name)
	}
	u1 := asUser(t, bin, env, user1UID, user1UID, group, "run", "shared", "--shell", "--",
		stamp("u1-start")+"; sleep 1; "+stamp("u1-end"))
	var out1 syncbuf.Buffer
	u1.Stdout, u1.Stderr = &out1, &out1
	must(u1.Start())
	u1done := make(chan struct{})
	var u1err error
	go func() { u1err = u1.Wait(); close(u1done) }()
	t.Cleanup(func() { _ = u1.Process.Kill(); <-u1done })
	for end := time.Now().Add(hangGuard); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(marks, "u1-start")); err == nil {
			break
		}
		select {
		case <-u1done:
			t.Fatalf("user1 fence run ended before its command started: %v: %s", u1err, out1.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("user1's command did not start within %v", hangGuard)
		}
	}

	busy := asUser(t, bin, env, user2UID, user2UID, group, "run", "-n", "shared", "--", "true")
	if out, err := busy.CombinedOutput(); exitOf(err) != 75 {
		t.Fatalf("user2 fence run -n while user1 holds: %v, %s; want exit 75 (busy)", err, out)
	}
	u2 := asUser(t, bin, env, user2UID, user2UID, group, "run", "shared", "--shell", "--", stamp("u2-start"))
	if out, err := u2.CombinedOutput(); err != nil {
		t.Fatalf("user2 fence run: %v: %s", err, out)
	}
	if <-u1done; u1err != nil {
		t.Fatalf("user1 fence run: %v: %s", u1err, out1.String())
	}
	u1end, u2start := readStamp(t, filepath.Join(marks, "u1-end")), readStamp(t, filepath.Join(marks, "u2-start"))
	if !u2start.After(u1end) {
		t.Fatalf("user2's command started at %v, before user1's ended at %v", u2start, u1end)
	}
	// The history and a once record of both users, in the same files.
	for _, uid := range []int{user1UID, user2UID} {
		c := asUser(t, bin, env, uid, uid, group, "run", "shared", "--once", "k", "--", "true")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("uid %d fence run --once: %v: %s", uid, err, out)
		}
	}
	c := asUser(t, bin, env, user2UID, user2UID, group, "show", "shared")
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "completed") {
		t.Fatalf("user2 fence show: %v: %s", err, out)
	}

	// Every file of the tree is the group's, 0660; every directory 2770.
	n := 0
	must(filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		want := os.FileMode(0o660)
		if d.IsDir() {
			want = os.ModeDir | os.ModeSetgid | 0o770
		}
		if fi.Mode() != want || st.Gid != sharedGID {
			t.Errorf("%s: mode %v, group %d; want %v, group %d", path, fi.Mode(), st.Gid, want, sharedGID)
		}
		n++
		return nil
	}))
	t.Logf("%d files and directories in the shared state directory, all the group's", n)

	// A user outside the group is refused, with one line.
	c = asUser(t, bin, env, otherUID, otherUID, nil, "status", "shared")
	out, err := c.CombinedOutput()
	if exitOf(err) != 125 || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), "not a member") {
		t.Errorf("a user outside the group: %v, %q; want exit 125 and one line", err, out)
	}
	// A world-writable state directory is refused, with one line saying how
	// to set one up.
	must(os.Chmod(state, os.ModeSetgid|0o777))
	c = asUser(t, bin, env, user1UID, user1UID, group, "status", "shared")
	out, err = c.CombinedOutput()
	if exitOf(err) != 125 || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), "world-writable") ||
		!strings.Contains(string(out), "install -d -m 2770 -g GROUP") {
		t.Errorf("a world-writable state directory: %v, %q; want exit 125 and one line with the set-up", err, out)
	}
	t.Logf("world-writable: %s", strings.TrimSpace(string(out)))
}

func exitOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

func readStamp(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return time.Unix(0, int64(f*1e9))
}

// TestStateDirRepairHints: the errors about files of a local state
// directory that a user may not use name the file, what is wrong with it and
// the command that repairs it, and that command does: a directory root used
// alone (its files 0600, root's) and then shared with a group (chgrp, chmod
// 2770 of the directory only, as an operator adopting it would), and a
// state directory that cannot be created. Neither says "coordinator
// unavailable".
func TestStateDirRepairHints(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test runs fence as another user (SysProcAttr.Credential)")
	}
	top, err := os.MkdirTemp("", "fence-repair-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(top, 0o755))
	bin := filepath.Join(top, "fence")
	b, err := os.ReadFile(fenceBin)
	must(err)
	must(os.WriteFile(bin, b, 0o755))
	env := func(state string) []string {
		return []string{"PATH=/usr/bin:/bin", "HOME=" + top, "XDG_CONFIG_HOME=" + top, "FENCE_STATE_DIR=" + state}
	}
	// fails runs fence as user1 and returns its one line of error (exit
	// 125), and the command between the backquotes after after.
	fails := func(after, state string, args ...string) (string, string) {
		t.Helper()
		out, err := asUser(t, bin, env(state), user1UID, user1UID, []uint32{sharedGID}, args...).CombinedOutput()
		msg := string(out)
		if exitOf(err) != 125 || strings.Count(msg, "\n") != 1 || strings.Contains(msg, "coordinator unavailable") {
			t.Fatalf("fence %s: %v, %q; want exit 125 and one line naming the file, not \"coordinator unavailable\"", strings.Join(args, " "), err, msg)
		}
		t.Logf("%s", strings.TrimSpace(msg))
		_, fix, ok := strings.Cut(msg, after+"`")
		fix, _, ok2 := strings.Cut(fix, "`")
		if !ok || !ok2 {
			t.Fatalf("no command after %q in %q", after, msg)
		}
		return msg, fix
	}
	works := func(state string, args ...string) {
		t.Helper()
		out, err := asUser(t, bin, env(state), user1UID, user1UID, []uint32{sharedGID}, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("fence %s after the repair: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	asRoot := func(fix string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", fix).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", fix, err, out)
		}
	}

	// Root used the directory alone, then it was shared.
	state := filepath.Join(top, "state")
	must(os.Mkdir(state, 0o700))
	for _, args := range [][]string{{"run", "job", "--", "true"}, {"freeze", "other"}, {"run", "done", "--once", "k", "--", "true"}} {
		c := exec.Command(bin, args...)
		c.Env = env(state)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("root fence %v: %v: %s", args, err, out)
		}
	}
	must(os.Chown(state, 0, sharedGID))
	must(os.Chmod(state, os.ModeSetgid|0o770))
	_, fix := fails("as root, run ", state, "run", "job", "--", "true")
	want := fmt.Sprintf("chgrp -R %d %s && chmod -R g+rwX,o-rwx %s && find %s -type d -exec chmod g+s {} +", sharedGID, state, state, state)
	if fix != want {
		t.Fatalf("repair command %q, want %q", fix, want)
	}
	asRoot(fix)
	works(state, "run", "job", "--", "true")
	works(state, "thaw", "other")
	works(state, "run", "done", "--once", "k2", "--", "true")

	// A lock file left 0600 by root.
	must(os.Chmod(filepath.Join(state, "locks", "job.lock"), 0o600))
	must(os.Chown(filepath.Join(state, "locks", "job.lock"), 0, 0))
	msg, fix := fails("as root, run ", state, "run", "job", "--", "true")
	if !strings.Contains(msg, filepath.Join(state, "locks", "job.lock")) || !strings.Contains(msg, "mode 0600") {
		t.Fatalf("%q names neither the lock file nor its mode", msg)
	}
	asRoot(fix)
	works(state, "run", "job", "--", "true")

	// A state directory the user cannot create.
	parent := filepath.Join(top, "root-only")
	must(os.Mkdir(parent, 0o755))
	state = filepath.Join(parent, "state")
	msg, fix = fails("as root with ", state, "run", "job", "--", "true")
	if want := fmt.Sprintf("install -d -m 0700 -o %d %s", user1UID, state); fix != want {
		t.Fatalf("%q: create command %q, want %q", msg, fix, want)
	}
	asRoot(fix)
	works(state, "run", "job", "--", "true")
}
