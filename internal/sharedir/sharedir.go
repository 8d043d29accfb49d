// Package sharedir decides how a local state directory is shared, and keeps
// the files and directories under it to that: a directory of one user (mode
// 0700, files 0600: the default), or one shared by the members of a group.
//
// A state directory is shared with a group when it is group-owned,
// group-writable (rwx) and setgid, and not world-writable:
//
//	install -d -m 2770 -g fence /var/lib/fence
//
// Every member of that group (and root) may use it; the directories under it
// are then 2770 and the files 0660, of that group (the setgid bit passes the
// group on to what is created inside; the modes are set explicitly, whatever
// the umask). A directory or file under it that is looser or of another
// group is refused, except that one of the current user's own (written
// before the directory was shared) is converted. A state directory that is
// neither the user's own nor shared that way (another user's, or
// world-writable) is refused with one line saying how to set it up. The
// local coordinator and the local guard and history stores share this
// package.
package sharedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Mode is how a state directory is shared. The zero Mode is private: the
// directory of one user.
type Mode struct {
	Group bool // shared by the members of GID
	GID   int
	// Dir is the state directory (set by OfDir), named in the repair
	// commands of messages.
	Dir string
}

// ErrRefused is wrapped by the errors about a state directory, file or
// directory of the state tree that may not be used.
var ErrRefused = errors.New("refused")

// SetupHint says how to share a state directory.
const SetupHint = "to share a state directory between the users of a group, create it with `install -d -m 2770 -g GROUP DIR`"

func refused(format string, args ...any) error {
	return &refusedError{fmt.Sprintf(format, args...)}
}

type refusedError struct{ msg string }

func (e *refusedError) Error() string        { return e.msg }
func (e *refusedError) Is(target error) bool { return target == ErrRefused }

// OfDir decides how the state directory at path is shared; it refuses a
// directory the current user may not use, a symbolic link (not followed) and
// a non-directory. It does not change the directory.
func OfDir(path string) (Mode, error) {
	fi, err := lstatDir(path)
	if err != nil {
		return Mode{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Mode{}, nil
	}
	mode := fi.Mode()
	shared := mode&os.ModeSetgid != 0 && mode.Perm()&0o070 == 0o070
	switch {
	case mode.Perm()&0o002 != 0 && (shared || int(st.Uid) != os.Geteuid()):
		return Mode{}, refused("state directory %s is world-writable (mode %s); %s", path, ModeText(mode), SetupHint)
	case shared:
		if !InGroup(int(st.Gid)) {
			return Mode{}, refused("state directory %s is shared with group %s, and the current user (uid %d) is not a member of it: add the user to the group, or use another --state-dir",
				path, GroupName(int(st.Gid)), os.Geteuid())
		}
		return Mode{Group: true, GID: int(st.Gid), Dir: path}, nil
	case int(st.Uid) != os.Geteuid():
		return Mode{}, refused("state directory %s is owned by uid %d, not by the current user (uid %d), and is not shared with a group (mode %s); %s",
			path, st.Uid, os.Geteuid(), ModeText(mode), SetupHint)
	}
	return Mode{Dir: path}, nil
}

// lstatDir is the Lstat of path, refused when it is a symbolic link or not
// a directory.
func lstatDir(path string) (os.FileInfo, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, err
	case fi.Mode()&os.ModeSymlink != 0:
		return nil, refused("state directory %s is a symbolic link, not a directory; give its real path", path)
	case !fi.IsDir():
		return nil, refused("state directory %s is not a directory", path)
	}
	return fi, nil
}

// FilePerm is the permission of the files of the tree.
func (m Mode) FilePerm() os.FileMode {
	if m.Group {
		return 0o660
	}
	return 0o600
}

// CheckDir checks a directory of the tree described by fi: one of the
// current user's is set to the tree's mode (and group); another user's must
// have them already. (The state directory itself is judged by OfDir.)
func (m Mode) CheckDir(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mine := int(st.Uid) == os.Geteuid()
	if !m.Group {
		if !mine {
			return refused("state directory %s is owned by uid %d, not by the current user (uid %d): %s", path, st.Uid, os.Geteuid(), fixHint(m))
		}
		if fi.Mode().Perm() != 0o700 || fi.Mode()&os.ModeSetgid != 0 {
			if err := os.Chmod(path, 0o700); err != nil {
				return refused("state directory %s has mode %s and cannot be set to 0700: %v", path, ModeText(fi.Mode()), err)
			}
		}
		return nil
	}
	want := os.ModeSetgid | 0o770
	if int(st.Gid) == m.GID && fi.Mode()&(os.ModePerm|os.ModeSetgid) == want {
		return nil
	}
	if mine {
		if int(st.Gid) != m.GID {
			if err := os.Lchown(path, -1, m.GID); err != nil {
				return refused("state directory %s is of group %s, not %s, and cannot be changed: %v", path, GroupName(int(st.Gid)), GroupName(m.GID), err)
			}
		}
		if err := os.Chmod(path, want); err != nil {
			return refused("state directory %s has mode %s and cannot be set to 2770: %v", path, ModeText(fi.Mode()), err)
		}
		return nil
	}
	return refused("directory %s (mode %s, group %s) does not match the shared state directory around it (2770, group %s): %s", path,
		ModeText(fi.Mode()), GroupName(int(st.Gid)), GroupName(m.GID), fixHint(m))
}

// fixHint is the command that gives every directory and file of the state
// directory its owner or group and mode: for a shared one its group, 2770 and
// 0660; for the current user's own that user, 0700 and 0600.
func fixHint(m Mode) string {
	d, where := "DIR", " on the state directory"
	if m.Dir != "" {
		d, where = shellQuote(m.Dir), ""
	}
	if !m.Group {
		return fmt.Sprintf("as root, run `chown -R %s %s && chmod -R u+rwX,go-rwx %s`%s", userName(os.Geteuid()), d, d, where)
	}
	g := strconv.Itoa(m.GID)
	if gr, err := user.LookupGroupId(g); err == nil {
		g = gr.Name
	}
	return fmt.Sprintf("as root, run `chgrp -R %s %s && chmod -R g+rwX,o-rwx %s && find %s -type d -exec chmod g+s {} +`%s", g, d, d, d, where)
}

// Explain adds to err, when it is a permission problem (fs.ErrPermission)
// with a file or directory of the local state directory stateDir, what that
// file is and the command that repairs it: for a shared directory the
// chgrp/chmod of the whole tree, for a user's own a chown/chmod, for a
// state directory that cannot be created how to create it. Other errors
// are returned as they are.
func Explain(stateDir string, err error) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	m, merr := OfDir(stateDir)
	switch {
	case errors.Is(merr, fs.ErrNotExist):
		return fmt.Errorf("%w: create the state directory as root with `install -d -m 0700 -o %s %s` (or `install -d -m 2770 -g GROUP %s` to share it with a group), or give one you may write with --state-dir",
			err, userName(os.Geteuid()), shellQuote(stateDir), shellQuote(stateDir))
	case merr != nil:
		return err
	}
	what := ""
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		if fi, lerr := os.Lstat(pe.Path); lerr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				what = fmt.Sprintf(" (%s is owned by %s, group %s, mode %s)", pe.Path, userName(int(st.Uid)), GroupName(int(st.Gid)), ModeText(fi.Mode()))
			}
		}
	}
	if m.Group {
		return fmt.Errorf("%w%s; the shared state directory %s wants every file 0660 and every directory 2770, of group %s: %s",
			err, what, m.Dir, GroupName(m.GID), fixHint(m))
	}
	return fmt.Errorf("%w%s; the state directory %s is the current user's, with every file 0600 and directory 0700: %s",
		err, what, m.Dir, fixHint(m))
}

// userName is the name of uid, or the number when it has none.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// shellQuote quotes s for sh when it holds anything but plain path
// characters.
func shellQuote(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+,:@%=", r)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// EnsureDir checks (creating it when missing, with its parents when
// parents is set) a directory of the tree below the state directory. It
// refuses a symbolic link or a non-directory.
func (m Mode) EnsureDir(path string, parents bool) (created bool, err error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		mk := os.Mkdir
		if parents {
			mk = os.MkdirAll
		}
		if err := mk(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return false, fmt.Errorf("cannot create state directory %s: %w", path, err)
		}
		created = true
	}
	fi, err := lstatDir(path)
	if err != nil {
		return false, err
	}
	return created, m.CheckDir(path, fi)
}

// OfSubdir returns how the state directory around dir (its parent) is
// shared, creating it (0700) when missing, and checks dir with EnsureDir
// (a new one is made durable): the opening of a store that keeps its files in one directory of the
// state directory.
func OfSubdir(dir string) (Mode, error) {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return Mode{}, err
	}
	m, err := OfDir(parent)
	if err != nil {
		return m, err
	}
	created, err := m.EnsureDir(dir, false)
	if err == nil && created {
		err = syncDir(parent) // the new directory's entry is durable
	}
	return m, err
}

// syncDir fsyncs a directory, making its entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// CheckFile checks a file of the tree, open as fd (-1: only checked, never
// converted) with status st: a regular file with the tree's permission,
// the current user's in a private tree, the tree's group's in a shared one.
// A file of the current user's in a shared tree that still has a private
// mode is converted (when fd is given). what names the file in messages.
func (m Mode) CheckFile(what, path string, fd int, st *unix.Stat_t) error {
	perm := st.Mode & 0o777
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return refused("%s %s is not a regular file", what, path)
	case !m.Group && int(st.Uid) != os.Geteuid():
		return refused("%s %s is owned by uid %d, not by the current user (uid %d): %s", what, path, st.Uid, os.Geteuid(), fixHint(m))
	case !m.Group && perm != 0o600:
		return refused("%s %s has mode %04o, want 0600", what, path, perm)
	case !m.Group:
		return nil
	case int(st.Gid) == m.GID && perm == 0o660:
		return nil
	case int(st.Uid) == os.Geteuid() && fd >= 0 && perm&0o007 == 0:
		if int(st.Gid) != m.GID {
			if err := unix.Fchown(fd, -1, m.GID); err != nil {
				return refused("%s %s is of group %s, not %s: %v", what, path, GroupName(int(st.Gid)), GroupName(m.GID), err)
			}
		}
		if err := unix.Fchmod(fd, 0o660); err != nil {
			return refused("%s %s has mode %04o and cannot be set to 0660: %v", what, path, perm, err)
		}
		return nil
	}
	return refused("%s %s has mode %04o and group %s, want 0660 and group %s (the shared state directory's): %s",
		what, path, perm, GroupName(int(st.Gid)), GroupName(m.GID), fixHint(m))
}

// CheckOpen is CheckFile on an open file.
func (m Mode) CheckOpen(what string, f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s %s: %w", what, f.Name(), err)
	}
	return m.CheckFile(what, f.Name(), int(f.Fd()), &st)
}

// Created gives a file this process has just created (with mode 0600) the
// tree's permission, whatever the umask.
func (m Mode) Created(fd int) error {
	if !m.Group {
		return nil
	}
	return unix.Fchmod(fd, 0o660)
}

// InGroup reports whether the current process may act as a member of gid.
func InGroup(gid int) bool {
	if os.Geteuid() == 0 || os.Getegid() == gid {
		return true
	}
	gs, err := os.Getgroups()
	return err == nil && slices.Contains(gs, gid)
}

// GroupName is "name (gid N)", or "gid N" when the group has no name.
func GroupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return fmt.Sprintf("%s (gid %d)", g.Name, gid)
	}
	return fmt.Sprintf("gid %d", gid)
}

// ModeText is a mode in octal with its setuid, setgid and sticky bits:
// "2770".
func ModeText(m os.FileMode) string {
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
