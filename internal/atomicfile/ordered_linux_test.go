package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExt4Ordered: only ext4 with its default ordering counts, read from
// the mountinfo line of the directory's device.
func TestExt4Ordered(t *testing.T) {
	const others = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
	line := func(fstype, superopts string) string {
		return others + "29 1 254:0 / / rw,relatime shared:1 - " + fstype + " /dev/vda " + superopts + "\n"
	}
	for _, tc := range []struct {
		name, mountinfo string
		want            bool
	}{
		{"ext4 defaults", line("ext4", "rw,errors=remount-ro"), true},
		{"ext4 data=journal", line("ext4", "rw,data=journal"), true},
		{"ext4 nodelalloc", line("ext4", "rw,nodelalloc"), true},
		{"ext4 noauto_da_alloc", line("ext4", "rw,noauto_da_alloc"), false},
		{"ext4 data=writeback", line("ext4", "rw,data=writeback"), false},
		{"ext3 on the ext4 driver", line("ext3", "rw"), false},
		{"xfs", line("xfs", "rw,attr2,inode64"), false},
		{"another device only", others, false},
		{"a line cut short", "29 1 254:0 / / rw - ext4\n", false},
	} {
		got, why := ext4Ordered([]byte(tc.mountinfo), 254, 0)
		if got != tc.want || why == "" {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// TestRenameOrderedHere: the answer for the test's own directories agrees
// with their file system: true only on tmpfs or ext4.
func TestRenameOrderedHere(t *testing.T) {
	for _, dir := range []string{t.TempDir(), "/dev/shm", "/proc"} {
		var fs unix.Statfs_t
		if unix.Statfs(dir, &fs) != nil {
			continue
		}
		ok, why := RenameOrdered(dir)
		t.Logf("%s: %v (%s)", dir, ok, why)
		known := int64(fs.Type) == unix.TMPFS_MAGIC || int64(fs.Type) == unix.EXT4_SUPER_MAGIC
		if ok && !known {
			t.Errorf("%s: ordered on file system type %#x", dir, fs.Type)
		}
		if int64(fs.Type) == unix.TMPFS_MAGIC && !ok {
			t.Errorf("%s: tmpfs not ordered (%s)", dir, why)
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
