package sqlguard

import "context"

// What the external tests reach of the package's internals.

type Config = config

const NoColumn = noColumn

var QuoteIdent = quoteIdent

func NewFromConfig(db DB, cfg Config) (*Table, error) { return newTable(db, cfg) }

func (t *Table) Config() Config { return t.cfg }

// UpdateValue is Update of the value column alone.
func (t *Table) UpdateValue(ctx context.Context, key any, token uint64, value []byte) error {
	return t.Update(ctx, key, token, map[string]any{t.cfg.ValueColumn: value})
}

// Statements are the statements a Table runs, with the dialect's
// placeholders, for the tests to read.
type Statements struct {
	// Update: the fenced UPDATE of the value (row must exist).
	Update string
	// Upsert: the fenced insert-or-update of Put.
	Upsert string
	// Select: Get's query (value, fence, timestamp).
	Select string
	// Fence: the query that reads a row's fence after a write changed
	// nothing.
	Fence string
	// AddFenceColumn: the ALTER TABLE of AddFenceColumn.
	AddFenceColumn string
	// Create: the CREATE TABLE IF NOT EXISTS of CreateTable.
	Create string
}

// Statements returns the statements the table runs.
func (t *Table) Statements() Statements {
	return Statements{
		Update:         t.updateStmt("k", 1, map[string]any{t.cfg.ValueColumn: []byte(nil)}).String(),
		Upsert:         t.upsertStmt("k", 1, nil).String(),
		Select:         t.selectStmt("k").String(),
		Fence:          t.fenceStmt("k").String(),
		AddFenceColumn: t.addFenceStmt(),
		Create:         t.createStmt(),
	}
}
