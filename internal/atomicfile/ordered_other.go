//go:build !linux

package atomicfile

// RenameOrdered is false outside Linux: the new file is fsynced before a
// rename over another (see the Linux version).
func RenameOrdered(string) (bool, string) { return false, "not Linux" }
