package local

import (
	"runtime"
	"testing"
)

func TestBootID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("boot id is Linux only")
	}
	if id := bootID(); id == "" || id != bootID() {
		t.Fatalf("boot id %q unstable or empty", id)
	}
}
