package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// explainPerm adds to err, when it is a permission problem (fs.ErrPermission)
// with a file or directory of the local state directory stateDir, what that
// file is and the command that repairs it: for a shared directory the
// chgrp/chmod of the whole tree, for a user's own a chown/chmod, for a
// state directory that cannot be created how to create it. Other errors,
// and errors about a state directory the local coordinator refuses
// (pkg/internal/sharedir says why), are returned as they are.
//
// It reads the state directory as pkg/internal/sharedir does (a directory
// is shared with a group when it is setgid and group rwx), which the
// program may not import: the two must agree.
func explainPerm(stateDir string, err error) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	fi, serr := os.Lstat(stateDir)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		return fmt.Errorf("%w: create the state directory as root with `install -d -m 0700 -o %s %s` (or `install -d -m 2770 -g GROUP %s` to share it with a group), or give one you may write with --state-dir",
			err, userName(os.Geteuid()), shellQuote(stateDir), shellQuote(stateDir))
	case serr != nil || !fi.IsDir():
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return err
	}
	mode := fi.Mode()
	shared := mode&os.ModeSetgid != 0 && mode.Perm()&0o070 == 0o070
	mine := int(st.Uid) == os.Geteuid()
	if mode.Perm()&0o002 != 0 && (shared || !mine) || shared && !inGroup(int(st.Gid)) || !shared && !mine {
		return err // refused by the coordinator, with its own message
	}
	what := ""
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		if fi, lerr := os.Lstat(pe.Path); lerr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				what = fmt.Sprintf(" (%s is owned by %s, group %s, mode %s)", pe.Path, userName(int(st.Uid)), groupName(int(st.Gid)), modeText(fi.Mode()))
			}
		}
	}
	d := shellQuote(stateDir)
	if shared {
		g := strconv.Itoa(int(st.Gid))
		if gr, err := user.LookupGroupId(g); err == nil {
			g = gr.Name
		}
		return fmt.Errorf("%w%s; the shared state directory %s wants every file 0660 and every directory 2770, of group %s: as root, run `chgrp -R %s %s && chmod -R g+rwX,o-rwx %s && find %s -type d -exec chmod g+s {} +`",
			err, what, stateDir, groupName(int(st.Gid)), g, d, d, d)
	}
	return fmt.Errorf("%w%s; the state directory %s is the current user's, with every file 0600 and directory 0700: as root, run `chown -R %s %s && chmod -R u+rwX,go-rwx %s`",
		err, what, stateDir, userName(os.Geteuid()), d, d)
}

// inGroup reports whether the current process may act as a member of gid.
func inGroup(gid int) bool {
	if os.Geteuid() == 0 || os.Getegid() == gid {
		return true
	}
	gs, _ := os.Getgroups()
	for _, g := range gs {
		if g == gid {
			return true
		}
	}
	return false
}

// userName is the name of uid, or the number when it has none.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// groupName is "name (gid N)", or "gid N" when the group has no name.
func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return fmt.Sprintf("%s (gid %d)", g.Name, gid)
	}
	return fmt.Sprintf("gid %d", gid)
}

// modeText is a mode in octal with its setuid, setgid and sticky bits:
// "2770".
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
