package sharedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOf: which state directories are one user's, which a group's, and
// which are refused (with the set-up in the message).
func TestOf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cases chown directories to other users and groups")
	}
	const gid, other = 50500, 65534
	for _, c := range []struct {
		name  string
		mode  os.FileMode
		uid   int
		group bool
		bad   string // a part of the refusal
	}{
		{"own-0700", 0o700, 0, false, ""},
		{"own-0755", 0o755, 0, false, ""},
		{"own-0770-no-setgid", 0o770, 0, false, ""},
		{"own-2770", os.ModeSetgid | 0o770, 0, true, ""},
		{"own-2775", os.ModeSetgid | 0o775, 0, true, ""},
		{"other-2770", os.ModeSetgid | 0o770, other, true, ""},
		{"own-2777", os.ModeSetgid | 0o777, 0, false, "world-writable"},
		{"other-0700", 0o700, other, false, "install -d -m 2770 -g GROUP"},
		{"other-0777", 0o777, other, false, "world-writable"},
		{"other-2750", os.ModeSetgid | 0o750, other, false, "not shared with a group"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, c.uid, gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			m, err := OfDir(dir)
			switch {
			case c.bad != "":
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.bad) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("OfDir = %+v, %v; want a one-line refusal with %q", m, err, c.bad)
				}
			case err != nil:
				t.Fatalf("OfDir: %v", err)
			case m.Group != c.group || (c.group && m.GID != gid):
				t.Fatalf("OfDir = %+v, want group %v (gid %d)", m, c.group, gid)
			}
		})
	}
}

// TestCheckFileShared: in a shared tree a file of the group with 0660 is
// accepted whoever owns it; one of ours with a private mode is converted; a
// looser or foreign one is refused.
func TestCheckFileShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: files of other users and groups")
	}
	const gid = 50501
	m := Mode{Group: true, GID: gid}
	dir := t.TempDir()
	mk := func(name string, uid, g int, perm os.FileMode) *os.File {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, g); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	if err := m.CheckOpen("file", mk("member", 65534, gid, 0o660)); err != nil {
		t.Errorf("another member's 0660 file: %v", err)
	}
	mine := mk("mine", 0, 0, 0o600)
	if err := m.CheckOpen("file", mine); err != nil {
		t.Fatalf("our private file: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(mine.Name(), &st); err != nil || st.Mode&0o777 != 0o660 || st.Gid != gid {
		t.Errorf("our file after the check: mode %o, gid %d; want 0660, %d", st.Mode&0o777, st.Gid, gid)
	}
	for name, f := range map[string]*os.File{
		"world-readable": mk("loose", 65534, gid, 0o664),
		"other-group":    mk("foreign", 65534, 65534, 0o660),
	} {
		if err := m.CheckOpen("file", f); !errors.Is(err, ErrRefused) {
			t.Errorf("%s file: %v, want refused", name, err)
		}
	}
}

// TestOfSubdir: a store's directory and its missing state directory are
// created 0700 (whatever the umask); in a shared state directory the store's
// is made 2770, of its group; a symbolic link is refused.
func TestOfSubdir(t *testing.T) {
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	dir := filepath.Join(t.TempDir(), "state", "store")
	m, err := OfSubdir(dir)
	if err != nil || m.Group {
		t.Fatalf("OfSubdir(new) = %+v, %v; want a private mode", m, err)
	}
	for _, d := range []string{filepath.Dir(dir), dir} {
		if fi, err := os.Lstat(d); err != nil || fi.Mode() != os.ModeDir|0o700 {
			t.Errorf("%s: %v, %v; want a directory 0700", d, fi.Mode(), err)
		}
	}

	shared := t.TempDir()
	if err := os.Chmod(shared, os.ModeSetgid|0o770); err != nil {
		t.Fatal(err)
	}
	if m, err = OfSubdir(filepath.Join(shared, "store")); err != nil || !m.Group {
		t.Fatalf("OfSubdir(in a shared directory) = %+v, %v; want the group's mode", m, err)
	}
	if fi, err := os.Lstat(filepath.Join(shared, "store")); err != nil || fi.Mode() != os.ModeDir|os.ModeSetgid|0o770 {
		t.Errorf("store in a shared directory: %v, %v; want 2770", fi.Mode(), err)
	}

	link := filepath.Join(filepath.Dir(dir), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OfSubdir(link); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("OfSubdir(symbolic link) = %v, want a refusal naming the link", err)
	}
}
