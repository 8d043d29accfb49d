// Package locktable draws the dashboard's table of locks. It renders only
// the rows on screen, so a frame costs the same with ten locks or ten
// thousand, and keeps the selection on the same lock while rows move.
package locktable

import (
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/fence-dev/fence/tui/internal/format"
	"github.com/fence-dev/fence/tui/internal/store"
	"github.com/fence-dev/fence/tui/styles"
)

// Model is the table's state: its size, the selection and the scroll
// position. The rows themselves live in a store.Store.
type Model struct {
	styles   *styles.Styles
	width    int
	height   int // body rows, without the header
	cursor   int // index of the selected row in the store's rows
	offset   int // index of the first row on screen
	selected string
	// NoHistory says the coordinator keeps no history: the counter
	// columns then show "-".
	NoHistory bool
	// Unconfirmed says the coordinator is not answering: the TTLs are not
	// known (a holder may have renewed, or lost its lease) and show "?",
	// and no held lock counts down to expiring.
	Unconfirmed bool
}

// New returns an empty table drawn with s.
func New(s *styles.Styles) Model { return Model{styles: s} }

// SetSize sets the table's size: width cells, height lines including the
// header line.
func (m *Model) SetSize(width, height int) {
	m.width = max(width, 0)
	m.height = max(height-1, 0)
}

// Selected is the name of the selected lock ("" when the table is empty).
func (m *Model) Selected() string { return m.selected }

// Sync follows the selected lock after the store changed: the cursor goes
// to its new place, or stays at the same index when it is gone (selecting
// the next row), and the view scrolls as little as needed to show it.
func (m *Model) Sync(st *store.Store) {
	rows := st.Rows()
	if m.selected != "" {
		if i := st.Index(m.selected); i >= 0 {
			m.cursor = i
		}
	}
	m.clamp(len(rows))
	if len(rows) > 0 {
		m.selected = rows[m.cursor].Info.Name
	} else {
		m.selected = ""
	}
}

// Move moves the selection by delta rows (negative: up).
func (m *Model) Move(st *store.Store, delta int) {
	m.cursor, m.selected = m.cursor+delta, ""
	m.Sync(st)
}

// Page moves the selection by pages (negative: up).
func (m *Model) Page(st *store.Store, pages int) { m.Move(st, pages*max(m.height, 1)) }

// Top selects the first row.
func (m *Model) Top(st *store.Store) { m.Move(st, -m.cursor) }

// Bottom selects the last row.
func (m *Model) Bottom(st *store.Store) { m.Move(st, len(st.Rows())) }

func (m *Model) clamp(n int) {
	if n == 0 {
		m.cursor, m.offset = 0, 0
		return
	}
	m.cursor = min(max(m.cursor, 0), n-1)
	m.offset = min(m.offset, m.cursor)
	if m.height > 0 && m.cursor >= m.offset+m.height {
		m.offset = m.cursor - m.height + 1
	}
	m.offset = min(max(m.offset, 0), max(n-m.height, 0))
}

// Visible is the rows on screen.
func (m *Model) Visible(st *store.Store) []*store.Row {
	rows := st.Rows()
	lo := min(m.offset, len(rows))
	hi := min(lo+m.height, len(rows))
	return rows[lo:hi]
}

// Column identifiers, in display order.
const (
	colName = iota
	colState
	colHolder
	colToken
	colTTL
	colHeld
	colRenew
	colFail
	colStale
	numCols
)

type column struct {
	title  string
	min    int // narrowest width
	max    int // widest width (0: no limit)
	stop   int // the width past which it is given no more (0: none); its last share may pass it
	weight int // share of the spare width
	prio   int // columns with the lowest prio are dropped first on narrow screens
	right  bool
	sort   store.SortKey
}

var columns = [numCols]column{
	colName:   {title: "NAME", min: 10, stop: 64, weight: 3, prio: 9, sort: store.ByName},
	colState:  {title: "STATE", min: 8, max: 8, prio: 8, sort: store.ByState},
	colHolder: {title: "HOLDER", min: 8, stop: 40, weight: 2, prio: 6, sort: -1},
	colToken:  {title: "TOKEN", min: 6, right: true, prio: 7, sort: store.ByToken},
	colTTL:    {title: "TTL", min: 10, max: 27, weight: 1, prio: 5, sort: store.ByTTL},
	colHeld:   {title: "HELD", min: 5, max: 5, right: true, prio: 4, sort: store.ByHeldFor},
	colRenew:  {title: "RENEW", min: 5, max: 5, right: true, prio: 1, sort: -1},
	colFail:   {title: "FAIL", min: 5, max: 5, right: true, prio: 3, sort: store.ByFailures},
	colStale:  {title: "STALE", min: 6, max: 6, right: true, prio: 2, sort: store.ByStale},
}

const (
	gutter  = 2 // the cursor mark
	ttlText = 5 // "4m05s"
)

// The layout of the table is three steps, each a pure function of the
// widths: which columns fit (fitting), their narrowest widths, and the
// spare width shared by weight (share) until none is left or no column
// takes more.

// layout gives each column its width for a screen width cells wide, 0 for a
// column left out. tokenW is the width the visible tokens need.
func layout(width, tokenW int) [numCols]int {
	on := fitting(width, tokenW)
	var w [numCols]int
	for i := range columns {
		if on[i] {
			w[i] = minWidth(i, tokenW)
		}
	}
	for spare := width - needed(on, tokenW); spare > 0; {
		given := share(&w, on, spare)
		if given == 0 {
			break
		}
		spare -= given
	}
	return w
}

// minWidth is column i's narrowest width: the token column's is at least
// what the tokens on screen need.
func minWidth(i, tokenW int) int {
	if i == colToken {
		return max(columns[i].min, tokenW)
	}
	return columns[i].min
}

// needed is the width the columns that are on take at their narrowest,
// with the gutter and one space between columns.
func needed(on [numCols]bool, tokenW int) int {
	n := gutter
	for i := range columns {
		if on[i] {
			n += minWidth(i, tokenW) + 1
		}
	}
	return n - 1
}

// fitting is the columns shown on a screen width cells wide: the lowest
// prio goes first until the rest fit; the name always stays.
func fitting(width, tokenW int) [numCols]bool {
	var on [numCols]bool
	for i := range on {
		on[i] = true
	}
	for needed(on, tokenW) > width {
		drop := lowestPrio(on)
		if drop < 0 {
			break
		}
		on[drop] = false
	}
	return on
}

// lowestPrio is the column that is on with the lowest prio, the name
// aside; -1 when none is left.
func lowestPrio(on [numCols]bool) int {
	drop, prio := -1, 1<<30
	for i, c := range columns {
		if on[i] && c.prio < prio && i != colName {
			drop, prio = i, c.prio
		}
	}
	return drop
}

// grows reports whether column i, w cells wide, takes a share of the
// spare width.
func grows(i, w int) bool {
	c := columns[i]
	return c.weight > 0 && (c.max == 0 || w < c.max) && (c.stop == 0 || w < c.stop)
}

// share gives one round of spare cells to the columns that grow, by
// weight (at least one cell each, in column order, within each column's
// maximum), and says how many it gave.
func share(w *[numCols]int, on [numCols]bool, spare int) int {
	total := 0
	for i, c := range columns {
		if on[i] && grows(i, w[i]) {
			total += c.weight
		}
	}
	given := 0
	for i, c := range columns {
		if given >= spare {
			break
		}
		if !on[i] || !grows(i, w[i]) {
			continue
		}
		add := min(max(spare*c.weight/total, 1), spare-given)
		if c.max > 0 {
			add = min(add, c.max-w[i])
		}
		w[i] += add
		given += add
	}
	return given
}

// View draws the header and the body: exactly height lines of at most the
// width. now is the time the TTLs count down to.
func (m *Model) View(st *store.Store, now time.Time) string {
	if m.width == 0 {
		return ""
	}
	vis := m.Visible(st)
	tokenW := 0
	for _, r := range vis {
		tokenW = max(tokenW, len(tokenText(r)))
	}
	w := layout(m.width, tokenW)
	key, reverse := st.Sort()

	var b strings.Builder
	b.Grow((m.height + 1) * (m.width + 32))
	m.header(&b, w, key, reverse)
	cells := make([]string, numCols)
	for i, r := range vis {
		b.WriteByte('\n')
		m.row(&b, w, cells, r, now, m.offset+i == m.cursor)
	}
	for i := len(vis); i < m.height; i++ {
		b.WriteByte('\n')
		if i == 0 && len(vis) == 0 {
			msg := "no locks"
			if f := st.Filter(); f != "" {
				msg = "no locks match " + strconv.Quote(f)
			}
			b.WriteString(m.styles.Dim.Render(format.Fit("  "+msg, m.width)))
		}
	}
	return b.String()
}

func (m *Model) header(b *strings.Builder, w [numCols]int, key store.SortKey, reverse bool) {
	titles := make([]string, numCols)
	for i, c := range columns {
		t := c.title
		switch {
		case c.sort == key && reverse:
			t += "▴"
		case c.sort == key:
			t += "▾"
		}
		if c.right {
			titles[i] = format.FitRight(t, w[i])
		} else {
			titles[i] = format.Fit(t, w[i])
		}
	}
	b.WriteString(m.styles.Accent.Render(format.Fit(joinCells(titles, w, m.width, false), m.width)))
}

// row draws one row. A selected row is drawn unstyled inside the selection
// style (nested colours would break its background); the others colour
// their state, TTL bar and counters.
func (m *Model) row(b *strings.Builder, w [numCols]int, cells []string, r *store.Row, now time.Time, selected bool) {
	x := m.rowOf(r, now, selected)
	for i := range cells {
		cells[i] = ""
		if w[i] > 0 {
			cells[i] = x.draw(i, w[i])
		}
	}
	line := joinCells(cells, w, m.width, selected)
	if selected {
		b.WriteString(m.styles.Selected.Render(line))
		return
	}
	b.WriteString(line)
}

// cellRow is what the cells of one row are drawn from: the table (its
// styles, and whether the TTLs and the counters are known) and the row.
type cellRow struct {
	*Model
	r        *store.Row
	now      time.Time
	state    store.State // as shown: held while the TTLs are not known
	selected bool        // its cells are not styled (see row)
}

func (m *Model) rowOf(r *store.Row, now time.Time, selected bool) *cellRow {
	x := &cellRow{Model: m, r: r, now: now, state: r.State(now), selected: selected}
	if m.Unconfirmed && r.Info.Held {
		x.state = store.Held
	}
	return x
}

// draw is column i's cell, width cells wide: its text (cell) fitted to
// the column's side, in its style (none on the selected row). A held
// lock's TTL, when known, is a bar (ttlBar).
func (x *cellRow) draw(i, width int) string {
	if i == colTTL && x.r.Info.Held && !x.Unconfirmed {
		return x.ttlBar(width)
	}
	v, st := x.cell(i)
	if columns[i].right || i == colTTL {
		v = format.FitRight(v, width)
	} else {
		v = format.Fit(v, width)
	}
	if st == nil || x.selected {
		return v
	}
	return st.Render(v)
}

// cell is column i's text and style (nil: none); "-", dim, for a value
// not known or not there. A free lock shows what the token sort sorts it
// by: its last token, in parentheses (not a live one).
func (x *cellRow) cell(i int) (string, *lipgloss.Style) {
	r, s := x.r, x.styles
	switch held := r.Info.Held; {
	case i == colName:
		return r.Info.Name, nil
	case i == colState:
		st := s.State(r.Info.Limit != nil, x.state)
		return r.Label(x.state), &st
	case i == colToken && held:
		return tokenText(r), nil
	case i == colToken:
		return tokenText(r), &s.Dim
	case i == colFail || i == colStale:
		return x.counter(i)
	case !held:
		return "-", &s.Dim
	case i == colHolder:
		return r.Info.Holder, nil
	case i == colTTL: // held, not known
		return "?", &s.Dim
	case i == colHeld && !r.Info.AcquiredAt.IsZero():
		return format.Duration(r.Info.HeldFor(x.now)), nil
	case i == colRenew:
		return strconv.Itoa(r.Renewals), nil
	}
	return "-", &s.Dim
}

// ttlBar is a held lock's TTL: the bar (in the expiring style when it
// is) and the time left.
func (x *cellRow) ttlBar(width int) string {
	left := x.r.TTLLeft(x.now)
	full, empty := format.Bar(left, x.r.Info.TTL, width-ttlText-1)
	fs := x.styles.Good
	if x.state == store.Expiring {
		fs = x.styles.Caution
	}
	if full != "" && !x.selected {
		full = fs.Render(full)
	}
	if empty != "" && !x.selected {
		empty = x.styles.BarEmpty.Render(empty)
	}
	return full + empty + " " + format.FitRight(format.Duration(format.Ceil(left)), ttlText)
}

// counter is column i's history counter (FAIL or STALE) and its style.
func (x *cellRow) counter(i int) (string, *lipgloss.Style) {
	n := x.r.Failures
	if i == colStale {
		n = x.r.Stale
	}
	v, alert := counterText(n, x.NoHistory)
	if alert {
		return v, &x.styles.Bad
	}
	return v, &x.styles.Dim
}

// counterText is a history counter's cell text, and whether it calls for
// attention: "-" without history, "·" not read yet (n < 0), else n,
// alerting when more than 0.
func counterText(n int, noHistory bool) (string, bool) {
	switch {
	case noHistory:
		return "-", false
	case n < 0:
		return "·", false
	}
	return strconv.Itoa(n), n > 0
}

// joinCells is the row's line: the cursor mark, the cells of the columns
// shown one space apart, padded to width.
func joinCells(cells []string, w [numCols]int, width int, selected bool) string {
	mark := "  "
	if selected {
		mark = "> "
	}
	var on []string
	used := gutter - 1 // the name is always on
	for i, c := range cells {
		if w[i] > 0 {
			on, used = append(on, c), used+1+w[i]
		}
	}
	return mark + strings.Join(on, " ") + strings.Repeat(" ", max(width-used, 0))
}

// tokenText is the TOKEN cell: the holder's token, "(N)" for the last
// token of a free lock, "-" when none is known (store.Row.Token, which the
// token sort uses, is 0 then).
func tokenText(r *store.Row) string {
	switch t := r.Token(); {
	case r.Info.Held:
		return strconv.FormatUint(t, 10)
	case t > 0:
		return "(" + strconv.FormatUint(t, 10) + ")"
	}
	return "-"
}
