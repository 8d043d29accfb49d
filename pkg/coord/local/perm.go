package local

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sharing. A state directory belongs to one user (mode 0700, files 0600:
// the default), or to a group whose members share its locks: the
// directory is group-owned, group-writable and setgid, and not
// world-writable (install -d -m 2770 -g fence /var/lib/fence). Then every
// member of the group (and root) may use it: the directories of the tree
// are 2770 and its files 0660, all of that group (the setgid bit passes the
// group on; the modes are set explicitly, whatever the umask). A file or
// directory of the tree that is looser than that, or of another group, is
// refused, and so is a directory that is neither the user's own nor shared
// that way: one line says how to set it up.

// sharing is how a state directory is shared.
type sharing struct {
	group bool // shared by the members of gid
	gid   int
}

// private is the sharing of a directory of one user.
var private = &sharing{}

const setupHint = "to share a state directory between the users of a group, create it as `install -d -m 2770 -g GROUP DIR`"

// sharingOf decides how the existing state directory path, described by
// fi, is shared; it refuses a directory the current user may not use.
func sharingOf(path string, fi os.FileInfo) (*sharing, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return private, nil
	}
	mode := fi.Mode()
	shared := mode&os.ModeSetgid != 0 && mode.Perm()&0o070 == 0o070
	switch {
	case mode.Perm()&0o002 != 0 && (shared || int(st.Uid) != os.Geteuid()):
		return nil, unavailable("state directory %s is world-writable (mode %s); %s", path, modeText(mode), setupHint)
	case shared:
		if !inGroup(int(st.Gid)) {
			return nil, unavailable("state directory %s is shared with group %s, and the current user (uid %d) is not a member of it: add the user to the group or use another --state-dir",
				path, groupName(int(st.Gid)), os.Geteuid())
		}
		return &sharing{group: true, gid: int(st.Gid)}, nil
	case int(st.Uid) != os.Geteuid():
		return nil, unavailable("state directory %s is owned by uid %d, not by the current user (uid %d), and is not shared with a group (mode %s); %s",
			path, st.Uid, os.Geteuid(), modeText(mode), setupHint)
	}
	return private, nil
}

// dirMode is the mode of the directories of the tree.
func (s *sharing) dirMode() os.FileMode {
	if s.group {
		return os.ModeSetgid | 0o770
	}
	return 0o700
}

// filePerm is the permission of the files of the tree.
func (s *sharing) filePerm() uint32 {
	if s.group {
		return 0o660
	}
	return 0o600
}

// checkDir checks a directory of the tree (not the state directory itself,
// which sharingOf judged): one of ours is set to the tree's mode; another
// user's must have it already.
func (s *sharing) checkDir(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mine := int(st.Uid) == os.Geteuid()
	if !s.group {
		if !mine {
			return unavailable("state directory %s is owned by uid %d, not by the current user (uid %d)", path, st.Uid, os.Geteuid())
		}
		if fi.Mode().Perm() != 0o700 || fi.Mode()&os.ModeSetgid != 0 {
			if err := os.Chmod(path, 0o700); err != nil {
				return unavailable("state directory %s has mode %s and cannot be set to 0700: %v", path, modeText(fi.Mode()), err)
			}
		}
		return nil
	}
	want := s.dirMode()
	if int(st.Gid) == s.gid && fi.Mode()&(os.ModePerm|os.ModeSetgid) == want {
		return nil
	}
	if mine {
		if int(st.Gid) != s.gid {
			if err := os.Lchown(path, -1, s.gid); err != nil {
				return unavailable("state directory %s is of group %s, not %s, and cannot be changed: %v", path, groupName(int(st.Gid)), groupName(s.gid), err)
			}
		}
		if err := os.Chmod(path, want); err != nil {
			return unavailable("state directory %s has mode %s and cannot be set to 2770: %v", path, modeText(fi.Mode()), err)
		}
		return nil
	}
	return unavailable("state directory %s (mode %s, group %s) does not match the shared state directory around it (mode 2770, group %s): run `chgrp -R %s DIR && chmod -R g+rwX DIR && find DIR -type d -exec chmod g+s {} +` on the state directory",
		path, modeText(fi.Mode()), groupName(int(st.Gid)), groupName(s.gid), groupName(s.gid))
}

// checkFileStat checks a file of the tree: a regular file, with the tree's
// permission; in a private tree owned by the current user, in a shared one
// of the tree's group. A file of ours in a shared tree that still has the
// private mode (written before the directory was shared) is converted.
// what names the file in messages ("lock \"x\": state file").
func (s *sharing) checkFileStat(what, path string, fd int, st *unix.Stat_t) error {
	perm := st.Mode & 0o777
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return unavailable("%s %s is not a regular file", what, path)
	case !s.group && int(st.Uid) != os.Geteuid():
		return unavailable("%s %s is owned by uid %d, not by the current user (uid %d)", what, path, st.Uid, os.Geteuid())
	case !s.group && perm != 0o600:
		return unavailable("%s %s has mode %04o, want 0600", what, path, perm)
	case !s.group:
		return nil
	case int(st.Gid) == s.gid && perm == 0o660:
		return nil
	case int(st.Uid) == os.Geteuid() && fd >= 0 && (perm == 0o600 || perm == 0o660 || perm == 0o640):
		if int(st.Gid) != s.gid {
			if err := unix.Fchown(fd, -1, s.gid); err != nil {
				return unavailable("%s %s is of group %s, not %s: %v", what, path, groupName(int(st.Gid)), groupName(s.gid), err)
			}
		}
		if err := unix.Fchmod(fd, 0o660); err != nil {
			return unavailable("%s %s has mode %04o and cannot be set to 0660: %v", what, path, perm, err)
		}
		return nil
	}
	return unavailable("%s %s has mode %04o and group %s, want 0660 and group %s (the shared state directory's)", what, path, perm, groupName(int(st.Gid)), groupName(s.gid))
}

// created sets the permission of a file this process has just created
// (the umask may have taken bits away).
func (s *sharing) created(fd int) error {
	if !s.group {
		return nil
	}
	return unix.Fchmod(fd, 0o660)
}

// ensureDir checks (creating it when missing) a directory of the state tree
// below the state directory.
func (c *Coordinator) ensureDir(path string, parents bool) (created bool, err error) {
	return ensureTreeDir(c.share, path, parents)
}

func ensureTreeDir(s *sharing, path string, parents bool) (created bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		mk := os.Mkdir
		if parents {
			mk = os.MkdirAll
		}
		if err := mk(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return false, unavailable("cannot create state directory %s: %v", path, err)
		}
		created = true
		fi, err = os.Lstat(path)
	}
	if err != nil {
		return false, unavailable("state directory %s: %v", path, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return false, unavailable("state directory %s is a symbolic link; give its real path", path)
	case !fi.IsDir():
		return false, unavailable("state directory %s is not a directory", path)
	}
	return created, s.checkDir(path, fi)
}

// fixMode gives a file written through atomicfile (mode 0600) the tree's
// permission.
func (c *Coordinator) fixMode(path string) error {
	if !c.share.group {
		return nil
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return unavailable("%s: %v", path, err)
	}
	return nil
}

// checkPerm checks a file of the tree read through os.File.
func (c *Coordinator) checkPerm(path string, fi os.FileInfo, _ bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	ust := unix.Stat_t{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid}
	return c.share.checkFileStat("file", path, -1, &ust)
}

const unixNoFollow = syscall.O_NOFOLLOW | syscall.O_CLOEXEC

// inGroup reports whether the current process may act as a member of gid.
func inGroup(gid int) bool {
	if os.Geteuid() == 0 || os.Getegid() == gid {
		return true
	}
	gs, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range gs {
		if g == gid {
			return true
		}
	}
	return false
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return fmt.Sprintf("%s (gid %d)", g.Name, gid)
	}
	return fmt.Sprintf("gid %d", gid)
}

func modeText(m os.FileMode) string {
	v := uint32(m.Perm())
	if m&os.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&os.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&os.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}
