package local

import (
	"fmt"
	"hash/crc32"

	"github.com/fence-dev/fence/internal/proc"
	"github.com/fence-dev/fence/pkg/clock"
)

// The lease record is the part of a holder that changes while the lease is
// held: its expiry (Renew), its command's process group (AttachProcess) and
// whether it was released (Release). It is stored as the state's second
// JSON member, "lease", a string of fixed length, so that these changes
// overwrite it where it is (one pwrite, no fsync, no rename) instead of
// replacing the state file. See the package doc, "Durability".
//
// Layout (recordLen bytes, ASCII):
//
//	t=<token, 20 digits> e=<expiry on the boot clock, ns, 20 digits> s=<h|r>
//	g=<pgid, 10 digits>@<leader start, 20 digits> c=<crc32 of the rest, 8 hex>
//
// s is h while held, r once released; g is 0@0 when no group is recorded.
// The checksum lets a reader that does not hold the lock tell a record it
// read in the middle of an overwrite (it then reads again).
type record struct {
	token    uint64
	expires  clock.Boot
	released bool
	group    *proc.ID
}

const (
	recordBody = "t=00000000000000000000 e=00000000000000000000 s=h g=0000000000@00000000000000000000"
	recordLen  = len(recordBody) + len(" c=00000000")
	// recordPrefix starts every state file that has a lease record; the
	// record's bytes follow it.
	recordPrefix = `{"version":2,"lease":"`
	recordOffset = len(recordPrefix)
)

// recordOf is the lease record of holder h.
func recordOf(h *holder) record {
	return record{token: h.Token, expires: h.ExpiresAt, group: h.Group}
}

func (r record) encode() string { return string(r.append(nil)) }

// append appends the record's recordLen bytes to b.
func (r record) append(b []byte) []byte {
	start := len(b)
	var pgid int
	var gstart uint64
	if r.group != nil {
		pgid, gstart = r.group.PID, r.group.Start
	}
	s := 'h'
	if r.released {
		s = 'r'
	}
	b = fmt.Appendf(b, "t=%020d e=%020d s=%c g=%010d@%020d", r.token, uint64(max(r.expires, 0)), s, max(pgid, 0), gstart)
	return fmt.Appendf(b, " c=%08x", crc32.ChecksumIEEE(b[start:]))
}

// decodeRecord parses a lease record; ok is false for anything encode
// cannot have written (or a record read while it was being overwritten):
// the record must encode back to s, its checksum included.
func decodeRecord(s string) (r record, ok bool) {
	var exp, gstart uint64
	var pgid int
	var st rune
	var sum uint32
	if _, err := fmt.Sscanf(s, "t=%20d e=%20d s=%c g=%10d@%20d c=%08x", &r.token, &exp, &st, &pgid, &gstart, &sum); err != nil {
		return record{}, false
	}
	r.expires, r.released = clock.Boot(exp), st == 'r'
	if pgid != 0 {
		r.group = &proc.ID{PID: pgid, Start: gstart}
	}
	return r, r.encode() == s && exp <= 1<<62 && r.token != 0
}
