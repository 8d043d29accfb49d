// Package locktable draws the dashboard's table of locks. It renders only
// the rows on screen, so a frame costs the same with ten locks or ten
// thousand, and keeps the selection on the same lock while rows move.
package locktable

import (
	"strconv"
	"strings"
	"time"

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

// Height is the number of body rows on screen.
func (m *Model) Height() int { return m.height }

// Selected is the name of the selected lock ("" when the table is empty).
func (m *Model) Selected() string { return m.selected }

// Cursor is the index of the selected row.
func (m *Model) Cursor() int { return m.cursor }

// Offset is the index of the first row on screen.
func (m *Model) Offset() int { return m.offset }

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
	m.cursor += delta
	m.clamp(len(st.Rows()))
	rows := st.Rows()
	if len(rows) > 0 {
		m.selected = rows[m.cursor].Info.Name
	}
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
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
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
	weight int // share of the spare width
	prio   int // columns with the lowest prio are dropped first on narrow screens
	right  bool
	sort   store.SortKey
}

var columns = [numCols]column{
	colName:   {title: "NAME", min: 10, weight: 3, prio: 9, sort: store.ByName},
	colState:  {title: "STATE", min: 8, max: 8, prio: 8, sort: store.ByState},
	colHolder: {title: "HOLDER", min: 8, weight: 2, prio: 6, sort: -1},
	colToken:  {title: "TOKEN", min: 6, right: true, prio: 7, sort: store.ByToken},
	colTTL:    {title: "TTL", min: 10, max: 27, weight: 1, prio: 5, sort: store.ByTTL},
	colHeld:   {title: "HELD", min: 5, max: 5, right: true, prio: 4, sort: store.ByHeldFor},
	colRenew:  {title: "RENEW", min: 5, max: 5, right: true, prio: 1, sort: -1},
	colFail:   {title: "FAIL", min: 5, max: 5, right: true, prio: 3, sort: store.ByFailures},
	colStale:  {title: "STALE", min: 6, max: 6, right: true, prio: 2, sort: store.ByStale},
}

const (
	gutter   = 2 // the cursor mark
	ttlText  = 5 // "4m05s"
	maxNameW = 64
	maxHoldW = 40
)

// layout gives each column its width for a screen width cells wide, 0 for a
// column left out. tokenW is the width the visible tokens need.
func layout(width, tokenW int) [numCols]int {
	var w [numCols]int
	on := [numCols]bool{}
	for i := range on {
		on[i] = true
	}
	mins := func(i int) int {
		if i == colToken {
			return max(columns[i].min, tokenW)
		}
		return columns[i].min
	}
	need := func() int {
		n := gutter
		for i := range columns {
			if on[i] {
				n += mins(i) + 1
			}
		}
		return n - 1
	}
	for need() > width {
		drop, prio := -1, 1<<30
		for i, c := range columns {
			if on[i] && c.prio < prio && i != colName {
				drop, prio = i, c.prio
			}
		}
		if drop < 0 {
			break
		}
		on[drop] = false
	}
	spare := width - need()
	for i := range columns {
		if on[i] {
			w[i] = mins(i)
		}
	}
	// Share the spare width by weight, within each column's maximum.
	for spare > 0 {
		total := 0
		for i, c := range columns {
			if on[i] && c.weight > 0 && (c.max == 0 || w[i] < c.max) && !(i == colName && w[i] >= maxNameW) && !(i == colHolder && w[i] >= maxHoldW) {
				total += c.weight
			}
		}
		if total == 0 {
			break
		}
		given := 0
		for i, c := range columns {
			if !on[i] || c.weight == 0 || (c.max > 0 && w[i] >= c.max) || (i == colName && w[i] >= maxNameW) || (i == colHolder && w[i] >= maxHoldW) {
				continue
			}
			add := max(spare*c.weight/total, 1)
			add = min(add, spare-given)
			if c.max > 0 {
				add = min(add, c.max-w[i])
			}
			w[i] += add
			given += add
			if given >= spare {
				break
			}
		}
		if given == 0 {
			break
		}
		spare -= given
	}
	return w
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
	var h strings.Builder
	h.WriteString(strings.Repeat(" ", gutter))
	first := true
	for i, c := range columns {
		if w[i] == 0 {
			continue
		}
		if !first {
			h.WriteByte(' ')
		}
		first = false
		t := c.title
		if c.sort == key {
			if reverse {
				t += "▴"
			} else {
				t += "▾"
			}
		}
		if c.right {
			h.WriteString(format.FitRight(t, w[i]))
		} else {
			h.WriteString(format.Fit(t, w[i]))
		}
	}
	b.WriteString(m.styles.Header.Render(format.Fit(h.String(), m.width)))
}

// row draws one row. A selected row is drawn unstyled inside the selection
// style (nested colours would break its background); the others colour
// their state, TTL bar and counters.
func (m *Model) row(b *strings.Builder, w [numCols]int, cells []string, r *store.Row, now time.Time, selected bool) {
	s := m.styles
	c := &s.Cell
	styled := !selected
	state := r.State(now)
	held := r.Info.Held
	if m.Unconfirmed && held {
		state = store.Held
	}
	dim := func(v string) string {
		if styled {
			return c.Dim.Render(v)
		}
		return v
	}
	counter := func(n, width int) string {
		switch {
		case m.NoHistory:
			return dim(format.FitRight("-", width))
		case n < 0:
			return dim(format.FitRight("·", width))
		case n == 0:
			return dim(format.FitRight("0", width))
		case styled:
			return c.Alert.Render(format.FitRight(strconv.Itoa(n), width))
		default:
			return format.FitRight(strconv.Itoa(n), width)
		}
	}
	for i := range cells {
		cells[i] = ""
	}
	if w[colName] > 0 {
		cells[colName] = format.Fit(r.Info.Name, w[colName])
	}
	if w[colState] > 0 {
		label := state.String()
		if r.Info.Limit != nil || state == store.Held && r.Info.Slots > 1 {
			label = r.Label(now) // "frozen", "limit 1", a semaphore's "2/3 held"
		}
		v := format.Fit(label, w[colState])
		if styled {
			switch {
			case r.Info.Limit != nil:
				v = c.Limit.Render(v)
			case state == store.Held:
				v = c.Held.Render(v)
			case state == store.Expiring:
				v = c.Expiring.Render(v)
			default:
				v = c.Free.Render(v)
			}
		}
		cells[colState] = v
	}
	if w[colHolder] > 0 {
		if held {
			cells[colHolder] = format.Fit(r.Info.Holder, w[colHolder])
		} else {
			cells[colHolder] = dim(format.Fit("-", w[colHolder]))
		}
	}
	if w[colToken] > 0 {
		if held {
			cells[colToken] = format.FitRight(tokenText(r), w[colToken])
		} else {
			// What the token sort sorts a free lock by: its last token,
			// in parentheses (not a live one), "-" when none is known.
			cells[colToken] = dim(format.FitRight(tokenText(r), w[colToken]))
		}
	}
	if w[colTTL] > 0 {
		barW := w[colTTL] - ttlText - 1
		if held && m.Unconfirmed {
			cells[colTTL] = dim(format.FitRight("?", w[colTTL]))
		} else if held {
			left := r.TTLLeft(now)
			full, empty := format.Bar(left, r.Info.TTL, barW)
			text := format.FitRight(format.Duration(format.Ceil(left)), ttlText)
			if styled {
				fs := c.BarFull
				if state == store.Expiring {
					fs = c.Expiring
				}
				if full != "" {
					full = fs.Render(full)
				}
				if empty != "" {
					empty = c.BarEmpty.Render(empty)
				}
			}
			cells[colTTL] = full + empty + " " + text
		} else {
			cells[colTTL] = dim(format.FitRight("-", w[colTTL]))
		}
	}
	if w[colHeld] > 0 {
		if held && !r.Info.AcquiredAt.IsZero() {
			cells[colHeld] = format.FitRight(format.Duration(r.Info.HeldFor(now)), w[colHeld])
		} else {
			cells[colHeld] = dim(format.FitRight("-", w[colHeld]))
		}
	}
	if w[colRenew] > 0 {
		if held {
			cells[colRenew] = format.FitRight(strconv.Itoa(r.Renewals), w[colRenew])
		} else {
			cells[colRenew] = dim(format.FitRight("-", w[colRenew]))
		}
	}
	if w[colFail] > 0 {
		cells[colFail] = counter(r.Failures, w[colFail])
	}
	if w[colStale] > 0 {
		cells[colStale] = counter(r.Stale, w[colStale])
	}

	var line strings.Builder
	if selected {
		line.WriteString("> ")
	} else {
		line.WriteString("  ")
	}
	used := gutter
	first := true
	for i := range cells {
		if w[i] == 0 {
			continue
		}
		if !first {
			line.WriteByte(' ')
			used++
		}
		first = false
		line.WriteString(cells[i])
		used += w[i]
	}
	if used < m.width {
		line.WriteString(strings.Repeat(" ", m.width-used))
	}
	if selected {
		b.WriteString(s.Selected.Render(line.String()))
		return
	}
	b.WriteString(line.String())
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
