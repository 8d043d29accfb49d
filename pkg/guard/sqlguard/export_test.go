package sqlguard

// What the external tests reach of the package's internals.

type (
	Config     = config
	Statements = statements
)

const NoColumn = noColumn

var QuoteIdent = quoteIdent

func NewFromConfig(db DB, cfg Config) (*Table, error) { return newTable(db, cfg) }

func (t *Table) Config() Config { return t.cfg }

func (t *Table) Statements() Statements { return t.statements() }
