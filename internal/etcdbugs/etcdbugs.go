// Package etcdbugs knows the lease-safety bugs of etcd server versions,
// for the warnings of the CLI, fence config and the dashboard (the etcd
// coordinator reports its members' versions, which this package judges).
package etcdbugs

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/fence-dev/fence/pkg/coord/etcd"
)

// LeaseBug is a known lease-safety bug of etcd servers: one that can end a
// lease whose renewals were acknowledged (fence's stop then comes from the
// lease watch, "has ended", not from its own deadline), or acknowledge a
// renewal the cluster does not keep.
type LeaseBug struct {
	// Issue and Fix are etcd's issue and pull request numbers.
	Issue, Fix string
	// Fixed lists the first fixed version of each minor release line
	// ("3.4.31"); a line not listed is fixed from its first release when
	// FixedFrom says so, else not fixed.
	Fixed map[string]string
	// Summary says what happens, in one line.
	Summary string
	// Since, for a bug no release fixes: the first version of each line
	// that has it ("3.4" -> "3.4.31"; a line not listed and newer than
	// every listed one has it from its first release).
	Since map[string]string
}

// Unfixed reports whether no release fixes b.
func (b LeaseBug) Unfixed() bool { return b.Since != nil }

// Known are the lease-safety bugs fence warns about (see
// docs/operations.md, which lists them with their sources).
var Known = []LeaseBug{
	{
		Issue: "etcd#15247", Fix: "PR #16822 (3.4 backport: #17465)",
		Fixed:   map[string]string{"3.4": "3.4.31", "3.5": "3.5.13"},
		Summary: "a stalled leader that resumes revokes leases the new leader kept alive, and answers keep-alives while it is no longer the leader",
	},
	{
		// PR #18428 (3.6.0; backports #18440 in 3.4.34, #18439 in 3.5.16)
		// made ensureLeadership skip its check while the member looks
		// active; 3.4.31-3.4.33 and 3.5.13-3.5.15 always check.
		Issue: "etcd#15247 (residual)", Fix: "none yet",
		Since:   map[string]string{"3.4": "3.4.34", "3.5": "3.5.16"},
		Summary: "a leader frozen longer than a lease's TTL still revokes it when it resumes: the fix's leadership check (ensureLeadership, server/etcdserver/server.go) is skipped while raft ticks look recent (isActive, added by PR #18428), as they do at once after a resume",
	},
}

// BugsOf returns the known lease-safety bugs of an etcd server version
// ("3.4.23"). A version that cannot be parsed has none.
func BugsOf(version string) []LeaseBug {
	maj, minor, patch, ok := parseVersion(version)
	if !ok || maj != 3 {
		return nil
	}
	line := fmt.Sprintf("%d.%d", maj, minor)
	var out []LeaseBug
	for _, b := range Known {
		if b.Unfixed() {
			since, ok := b.Since[line]
			_, _, sp, _ := parseVersion(since)
			if (ok && patch >= sp) || (!ok && minor >= 6) {
				out = append(out, b)
			}
			continue
		}
		fixed, ok := b.Fixed[line]
		switch {
		case ok:
			_, _, fp, _ := parseVersion(fixed)
			if patch < fp {
				out = append(out, b)
			}
		case minor < 4:
			out = append(out, b) // older lines never got the fix
			// Later lines (3.6 on) have it from their first release.
		}
	}
	return out
}

func parseVersion(v string) (maj, minor, patch int, ok bool) {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return 0, 0, 0, false
		}
		n[i] = x
	}
	return n[0], n[1], n[2], true
}

// Warning returns one line for the whole cluster ("" when none)
// naming every member whose version has a known lease-safety bug that a
// release fixes (an upgrade helps), with its version, for an operator.
// Bugs no release fixes are shown by fence config and the dashboard, not
// warned about on every command.
func Warning(vs []etcd.MemberVersion) string {
	var (
		versions []string                // affected versions, first seen first
		members  = map[string][]string{} // version -> its members
		bugs     []LeaseBug              // first seen first
		fixes    = map[string][]string{} // issue -> the releases that fix it
	)
	for _, v := range vs {
		_, minor, _, _ := parseVersion(v.Version)
		affected := false
		for _, b := range BugsOf(v.Version) {
			if b.Unfixed() {
				continue
			}
			affected = true
			if fixes[b.Issue] == nil {
				bugs = append(bugs, b)
			}
			if f := b.Fixed[fmt.Sprintf("3.%d", minor)]; f != "" {
				fixes[b.Issue] = append(fixes[b.Issue], f)
			} else {
				fixes[b.Issue] = append(fixes[b.Issue], slices.Collect(maps.Values(b.Fixed))...)
			}
		}
		if !affected {
			continue
		}
		if members[v.Version] == nil {
			versions = append(versions, v.Version)
		}
		members[v.Version] = append(members[v.Version], hostOf(v.Endpoint))
	}
	if len(bugs) == 0 {
		return ""
	}
	var who, ids, sums []string
	for _, ver := range versions {
		if ms := members[ver]; len(ms) == 1 {
			who = append(who, ms[0]+" runs "+ver)
		} else {
			who = append(who, andList(ms)+" run "+ver)
		}
	}
	for _, b := range bugs {
		fs := slices.Compact(slices.Sorted(slices.Values(fixes[b.Issue])))
		ids = append(ids, b.Issue+", fixed in "+andList(fs))
		sums = append(sums, b.Summary)
	}
	which, bug := "has", "a known lease-safety bug"
	if len(versions) > 1 {
		which = "have"
	}
	if len(bugs) > 1 {
		bug = "known lease-safety bugs"
	}
	return fmt.Sprintf("etcd %s, which %s %s (%s): %s; see docs/operations.md", strings.Join(who, ", "), which, bug, strings.Join(ids, "; "), strings.Join(sums, "; "))
}

// andList joins "a", "a and b", "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func hostOf(ep string) string {
	if i := strings.Index(ep, "://"); i >= 0 {
		return ep[i+3:]
	}
	return ep
}
