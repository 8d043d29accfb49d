package atomicfile

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// RenameOrdered reports whether the file system that holds dir keeps the
// data of a file renamed over an existing one ahead of the rename itself:
// after a crash of the machine, the path holds the old content or the new,
// never a file cut short or empty, with no fsync of the new file before
// the rename. why names the file system and the reason.
//
//   - ext4 (not ext2 or ext3, which share its magic number) with
//     auto_da_alloc, the default, and data=ordered (the default) or
//     data=journal: on a replace-via-rename ext4 forces the new file's
//     delayed-allocation blocks to be allocated, and in data=ordered mode
//     they are written before the journal commit that holds the rename
//     (the kernel's Documentation/admin-guide/ext4.rst, auto_da_alloc);
//   - tmpfs and ramfs: nothing of them outlives a crash.
//
// Everything else is false: xfs, btrfs, ext4 mounted noauto_da_alloc or
// data=writeback, network file systems, and a file system that cannot be
// identified. Callers fsync the new file before the rename there.
func RenameOrdered(dir string) (ok bool, why string) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, "statfs: " + err.Error()
	}
	switch int64(fs.Type) {
	case unix.TMPFS_MAGIC, unix.RAMFS_MAGIC:
		return true, "tmpfs: nothing outlives a crash"
	case unix.EXT4_SUPER_MAGIC:
	default:
		return false, fmt.Sprintf("file system type %#x", fs.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, "stat: " + err.Error()
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, "mountinfo: " + err.Error()
	}
	return ext4Ordered(mi, unix.Major(st.Dev), unix.Minor(st.Dev))
}

// ext4Ordered decides RenameOrdered for the file system of device
// major:minor from /proc/self/mountinfo.
func ext4Ordered(mountinfo []byte, major, minor uint32) (bool, string) {
	dev := fmt.Sprintf("%d:%d", major, minor)
	for line := range bytes.SplitSeq(mountinfo, []byte("\n")) {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		f := strings.Fields(string(line))
		if len(f) < 3 || f[2] != dev {
			continue
		}
		sep := -1
		for i, s := range f {
			if s == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) {
			return false, "mountinfo line of " + dev + " not understood"
		}
		if fstype := f[sep+1]; fstype != "ext4" {
			return false, fstype + " (not ext4)"
		}
		for _, o := range strings.Split(f[sep+3], ",") {
			switch o {
			case "noauto_da_alloc", "data=writeback":
				return false, "ext4 mounted " + o
			}
		}
		return true, "ext4 with auto_da_alloc: a replace-via-rename writes the data first"
	}
	return false, "no mount of device " + dev + " in mountinfo"
}
