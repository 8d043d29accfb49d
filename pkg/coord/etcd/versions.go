package etcd

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MemberVersion is the server version one endpoint reported.
type MemberVersion struct {
	Endpoint string
	Version  string // empty when Err is set
	Err      error
}

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

// KnownLeaseBugs are the lease-safety bugs fence warns about (see
// docs/operations.md, which lists them with their sources).
var KnownLeaseBugs = []LeaseBug{
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
	for _, b := range KnownLeaseBugs {
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

// ServerVersions asks every endpoint's member for its version, at once,
// over the connections the Coordinator has (one per member with several
// endpoints).
func (c *Coordinator) ServerVersions(ctx context.Context) []MemberVersion {
	eps := c.cli.Endpoints()
	out := make([]MemberVersion, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		out[i].Endpoint = ep
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cli *clientv3.Client
			if c.ka.multi() {
				var err error
				if cli, err = c.ka.lanes[i].client(); err != nil {
					out[i].Err = err
					return
				}
			} else {
				cli = c.cli
			}
			st, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
			if err != nil {
				out[i].Err = c.mapErr(ctx, "status", err)
				return
			}
			out[i].Version = st.Version
		}()
	}
	wg.Wait()
	return out
}

// VersionWarnings returns one line per member whose version has a known
// lease-safety bug that a release fixes (an upgrade helps), for an
// operator. Bugs no release fixes are shown by fence config and the
// dashboard, not warned about on every command.
func VersionWarnings(vs []MemberVersion) []string {
	var out []string
	for _, v := range vs {
		for _, b := range BugsOf(v.Version) {
			if b.Unfixed() {
				continue
			}
			fix := "not fixed in any release yet"
			if maj, minor, _, _ := parseVersion(v.Version); b.Fixed[fmt.Sprintf("%d.%d", maj, minor)] != "" {
				fix = "fixed in " + b.Fixed[fmt.Sprintf("%d.%d", maj, minor)]
			} else if len(b.Fixed) > 0 {
				fix = "fixed in " + strings.Join(sortedValues(b.Fixed), " and ")
			}
			out = append(out, fmt.Sprintf("etcd %s runs %s, which has a known lease-safety bug (%s, %s): %s; see docs/operations.md",
				hostOf(v.Endpoint), v.Version, b.Issue, fix, b.Summary))
		}
	}
	return out
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func hostOf(ep string) string {
	if i := strings.Index(ep, "://"); i >= 0 {
		return ep[i+3:]
	}
	return ep
}
