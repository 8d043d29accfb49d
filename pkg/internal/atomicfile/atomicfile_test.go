package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		fi, err := WritePerm(path, []byte(content), true, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(content)) {
			t.Fatalf("info size %d, want %d", fi.Size(), len(content))
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 || !os.SameFile(st, fi) {
			t.Fatalf("mode %v, same file %v, %v", st.Mode().Perm(), os.SameFile(st, fi), err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("leftovers in the directory: %v", entries)
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// Renaming a file over a non-empty directory fails after the temp file
	// was written: the temp file must not stay behind.
	target := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := WritePerm(target, []byte("x"), false, 0o600); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"a/b":     "a%2Fb",
		".hidden": "%2Ehidden",
		"a.b-c_d": "a.b-c_d",
		"x y%":    "x%20y%25",
		"é":       "%C3%A9",
		"~=":      "%7E%3D",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteViaReplacesLeftover: WriteViaPerm writes through the named temp, and
// a leftover there (a partial write, a symbolic link to a file elsewhere) is
// replaced, never written through.
func TestWriteViaReplacesLeftover(t *testing.T) {
	dir := t.TempDir()
	path, temp := filepath.Join(dir, "f.json"), filepath.Join(dir, ".tmp~f")
	if err := os.WriteFile(temp, []byte("partial write of a dead wri"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteViaPerm(path, temp, []byte("one"), false, 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, temp); err != nil {
		t.Fatal(err)
	}
	fi, err := WriteViaPerm(path, temp, []byte("two"), true, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v; want two", got, err)
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 || !os.SameFile(st, fi) {
		t.Fatalf("%s: %v, %v", path, st.Mode(), err)
	}
	if got, _ := os.ReadFile(outside); string(got) != "keep" {
		t.Fatalf("the symbolic link's target was written: %q", got)
	}
	if _, err := os.Lstat(temp); !os.IsNotExist(err) {
		t.Fatalf("the temp is left behind: %v", err)
	}
}

// TestFileBase: an escape up to maxLen, the hash prefix and the SHA-256
// beyond; Unescape reverses Escape and refuses what Escape cannot yield.
func TestFileBase(t *testing.T) {
	for _, tc := range []struct {
		s      string
		maxLen int
		want   string
	}{
		{"a/b", 200, "a%2Fb"},
		{".x", 200, "%2Ex"},
		{strings.Repeat("/", 66), 200, strings.Repeat("%2F", 66)},
		{strings.Repeat("/", 67), 200, "~3eb1349aab9dc074e2028d6801ffe27e5de46b30e87a4e66e5fbb0b764f514e1"},
	} {
		if got := FileBase(tc.s, tc.maxLen, "~"); got != tc.want {
			t.Errorf("FileBase(%q, %d) = %q, want %q", tc.s, tc.maxLen, got, tc.want)
		}
	}
	for _, s := range []string{"", "a", "a/b", ".hidden", "ü日本", "%", "a b\x00\xff"} {
		if got, ok := Unescape(Escape(s)); !ok || got != s {
			t.Errorf("Unescape(Escape(%q)) = %q, %v", s, got, ok)
		}
	}
	for _, bad := range []string{"%", "%2", "%2f", "%G0", "a/b", ".x", "a b", "~x", "=x"} {
		if _, ok := Unescape(bad); ok {
			t.Errorf("Unescape(%q) accepted", bad)
		}
	}
}
