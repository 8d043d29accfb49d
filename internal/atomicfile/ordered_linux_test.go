package atomicfile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExt4Ordered: only ext4 with a journal in ordered or journal mode and
// auto_da_alloc counts, read from its /proc/fs/ext4/<device>/options.
func TestExt4Ordered(t *testing.T) {
	opts := func(o ...string) string {
		return strings.Join(append([]string{"rw", "delalloc", "barrier", "user_xattr"}, o...), "\n") + "\n"
	}
	for _, tc := range []struct {
		name, options string
		want          bool
	}{
		{"defaults", opts("auto_da_alloc", "data=ordered"), true},
		{"data=journal", opts("auto_da_alloc", "data=journal"), true},
		{"data=writeback", opts("auto_da_alloc", "data=writeback"), false},
		{"noauto_da_alloc", opts("noauto_da_alloc", "data=ordered"), false},
		{"no journal (no data= mode)", opts("auto_da_alloc"), false},
		{"no auto_da_alloc listed", opts("data=ordered"), false},
		{"empty", "", false},
	} {
		got, why := ext4Ordered(tc.options)
		if got != tc.want || why == "" {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// TestRenameOrderedHere: on the machine's own directories, true only on
// tmpfs, or on an ext4 that has a journal (its jbd2 entry is there).
func TestRenameOrderedHere(t *testing.T) {
	for _, dir := range []string{t.TempDir(), "/dev/shm", "/proc"} {
		var fs unix.Statfs_t
		if unix.Statfs(dir, &fs) != nil {
			continue
		}
		ok, why := RenameOrdered(dir)
		t.Logf("%s: %v (%s)", dir, ok, why)
		switch int64(fs.Type) {
		case unix.TMPFS_MAGIC:
			if !ok {
				t.Errorf("%s: tmpfs not ordered (%s)", dir, why)
			}
		case unix.EXT4_SUPER_MAGIC:
			if ok && !hasJournal(t, dir) {
				t.Errorf("%s: ordered (%s), but its ext4 has no journal in /proc/fs/jbd2", dir, why)
			}
		default:
			if ok {
				t.Errorf("%s: ordered on file system type %#x", dir, fs.Type)
			}
		}
	}
}

// hasJournal reports whether the ext4 of dir has a jbd2 journal.
func hasJournal(t *testing.T, dir string) bool {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(filepath.Join("/proc/fs/jbd2", filepath.Base(link)+"-*"))
	return len(m) > 0
}

// TestRenameOrderedOnExt4: a real ext4 with a journal, on a loop device,
// mounted with its defaults is ordered, and mounted data=writeback or
// noauto_da_alloc is not; made without a journal, it is not either. It
// needs root, mkfs.ext4 and a loop device, and is skipped without them.
func TestRenameOrderedOnExt4(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("no mkfs.ext4")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "ext4.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mkfsOpts, mountOpts string
		want                bool
	}{
		{"", "loop", true},
		{"", "loop,data=writeback", false},
		{"", "loop,noauto_da_alloc", false},
		{"-O ^has_journal", "loop", false},
	} {
		if err := os.Truncate(img, 0); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 32<<20); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-q", "-F"}, strings.Fields(tc.mkfsOpts)...)
		if out, err := exec.Command(mkfs, append(args, img)...).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4 %s: %v\n%s", tc.mkfsOpts, err, out)
		}
		if out, err := exec.Command("mount", "-o", tc.mountOpts, img, mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a loop device here: %v: %s", err, out)
		}
		got, why := RenameOrdered(mnt)
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v: %s", err, out)
		}
		t.Logf("mkfs %q, mount -o %s: %v (%s)", tc.mkfsOpts, tc.mountOpts, got, why)
		if got != tc.want {
			t.Errorf("mkfs %q, mount -o %s: %v (%s), want %v", tc.mkfsOpts, tc.mountOpts, got, why, tc.want)
		}
	}
}

// TestReplaceVia: the first write of a path is fsynced, a replacement is
// not; the content is replaced either way and no temporary file is left.
func TestReplaceVia(t *testing.T) {
	dir := t.TempDir()
	path, temp := filepath.Join(dir, "state.json"), filepath.Join(dir, ".tmp~state")
	syncs := 0
	syncFile = func(f *os.File) error { syncs++; return f.Sync() }
	defer func() { syncFile = (*os.File).Sync }()
	for i, content := range []string{"first", "second", "third, longer"} {
		if _, err := ReplaceVia(path, temp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != content {
			t.Fatalf("write %d: read %q, %v; want %q", i, got, err, content)
		}
		if want := 1; syncs != want {
			t.Fatalf("after write %d: %d fsyncs, want %d (the first write only)", i, syncs, want)
		}
	}
	if _, err := WriteViaPerm(path, temp, []byte("durable"), false, 0o600); err != nil || syncs != 2 {
		t.Fatalf("WriteViaPerm: %v, %d fsyncs; want its own fsync", err, syncs)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "state") {
		t.Fatalf("directory holds %v, want the state alone", entries)
	}
}
