package local

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/internal/sharedir"
)

// Sharing. A state directory belongs to one user (mode 0700, files 0600:
// the default), or to a group whose members share its locks: the
// directory is group-owned, group-writable and setgid, and not
// world-writable (install -d -m 2770 -g fence /var/lib/fence). Then every
// member of the group (and root) may use it: the directories of the tree
// are 2770 and its files 0660, all of that group. Anything looser, and a
// directory that is neither the user's own nor shared that way, is refused
// with one line saying how to set it up (package internal/sharedir, which
// the guard and history stores share).

// sharing is how the state directory is shared.
type sharing struct{ m sharedir.Mode }

// private is the sharing of a directory of one user.
var private = &sharing{}

// sharingOf decides how the existing state directory path, described by
// fi, is shared.
func sharingOf(path string, fi os.FileInfo) (*sharing, error) {
	m, err := sharedir.Of(path, fi)
	if err != nil {
		return nil, unavailable("%v", err)
	}
	return &sharing{m: m}, nil
}

func (s *sharing) group() bool { return s.m.Group }

// filePerm is the permission of the files of the tree.
func (s *sharing) filePerm() os.FileMode { return s.m.FilePerm() }

// checkDir checks a directory of the tree.
func (s *sharing) checkDir(path string, fi os.FileInfo) error {
	if err := s.m.CheckDir(path, fi); err != nil {
		return unavailable("%v", err)
	}
	return nil
}

// checkFileStat checks a file of the tree (see sharedir.Mode.CheckFile).
func (s *sharing) checkFileStat(what, path string, fd int, st *unix.Stat_t) error {
	if err := s.m.CheckFile(what, path, fd, st); err != nil {
		return unavailable("%v", err)
	}
	return nil
}

// ensureTreeDir checks (creating it when missing) a directory of the state
// tree below the state directory.
func ensureTreeDir(s *sharing, path string, parents bool) (bool, error) {
	created, err := s.m.EnsureDir(path, parents)
	if err != nil {
		return created, unavailable("%v", err)
	}
	return created, nil
}

// checkPerm checks a file of the tree read through os.File.
func (c *coordinator) checkPerm(path string, fi os.FileInfo, _ bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	ust := unix.Stat_t{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid}
	return c.share.checkFileStat("file", path, -1, &ust)
}

const unixNoFollow = syscall.O_NOFOLLOW | syscall.O_CLOEXEC
