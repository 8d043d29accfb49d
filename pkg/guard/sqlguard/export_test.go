package sqlguard

import "context"

// What the external tests reach of the package's internals.

type (
	Config     = config
	Statements = statements
)

const NoColumn = noColumn

var QuoteIdent = quoteIdent

func NewFromConfig(db DB, cfg Config) (*Table, error) { return newTable(db, cfg) }

func (t *Table) Config() Config { return t.cfg }

// UpdateValue is Update of the value column alone.
func (t *Table) UpdateValue(ctx context.Context, key any, token uint64, value []byte) error {
	return t.Update(ctx, key, token, map[string]any{t.cfg.ValueColumn: value})
}

func (t *Table) Statements() Statements { return t.statements() }
