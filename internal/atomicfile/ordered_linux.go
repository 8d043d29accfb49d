package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// RenameOrdered reports whether the file system that holds dir keeps the
// data of a file renamed over an existing one ahead of the rename itself:
// after a crash of the machine, the path holds the old content or the new,
// never a file cut short or empty, with no fsync of the new file before
// the rename. why names the file system and the reason.
//
//   - ext4 with a journal in data=ordered (the default) or data=journal
//     mode, and auto_da_alloc (the default): on a replace-via-rename ext4
//     forces the new file's delayed-allocation blocks to be allocated, and
//     the journal writes them before the commit that holds the rename (the
//     kernel's Documentation/admin-guide/ext4.rst, auto_da_alloc). The
//     options are read from /proc/fs/ext4/<device>/options, which lists
//     the defaults too; an ext4 without a journal has no data= mode there,
//     and nothing orders its rename after the data;
//   - tmpfs and ramfs: nothing of them outlives a crash.
//
// Everything else is false: xfs, btrfs, ext4 without a journal, mounted
// noauto_da_alloc or data=writeback, network and overlay file systems, and
// a file system that cannot be identified. Callers fsync the new file
// before the rename there.
func RenameOrdered(dir string) (ok bool, why string) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, "statfs: " + err.Error()
	}
	switch int64(fs.Type) {
	case unix.TMPFS_MAGIC, unix.RAMFS_MAGIC:
		return true, "tmpfs: nothing outlives a crash"
	case unix.EXT4_SUPER_MAGIC: // also ext2 and ext3: /proc/fs/ext4 lists only ext4
	default:
		return false, fmt.Sprintf("file system type %#x", fs.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, "stat: " + err.Error()
	}
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return false, "block device: " + err.Error()
	}
	dev := filepath.Base(link)
	opts, err := os.ReadFile(filepath.Join("/proc/fs/ext4", dev, "options"))
	if err != nil {
		return false, "ext4 options of " + dev + ": " + err.Error()
	}
	ok, why = ext4Ordered(string(opts))
	return ok, dev + ": " + why
}

// ext4Ordered decides RenameOrdered from the contents of an ext4 file
// system's /proc/fs/ext4/<device>/options (one option per line).
func ext4Ordered(options string) (bool, string) {
	journal, autoDA := false, false
	for _, o := range strings.Fields(options) {
		switch o {
		case "data=ordered", "data=journal":
			journal = true
		case "auto_da_alloc":
			autoDA = true
		case "data=writeback", "noauto_da_alloc":
			return false, "ext4 mounted " + o
		}
	}
	switch {
	case !journal:
		return false, "ext4 without a journal (no data= mode): nothing orders a rename after the data"
	case !autoDA:
		return false, "ext4 without auto_da_alloc"
	}
	return true, "ext4 with a journal and auto_da_alloc: a replace-via-rename writes the data first"
}
