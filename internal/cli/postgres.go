package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/pkg/coord/postgres"
)

func newCmdPostgres(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "postgres",
		Short: "The PostgreSQL coordinator's tables",
		Long: `fence creates its tables in --postgres-schema (default fence) on first use
when its role may. When it may not, an administrator runs the SQL that
"fence postgres schema" prints.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "Print the SQL that creates fence's tables, for an administrator",
		Long: `Print the SQL that creates fence's tables in --postgres-schema (default fence),
for an administrator to run when fence's role may not create them. It is
idempotent (CREATE ... IF NOT EXISTS) and connects to nothing. Grant fence's
role USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on its tables and
USAGE on its sequence.`,
		Example: `  fence postgres schema | psql -h db-1 -U postgres fence_db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.Config()
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(f.IO.Out, postgres.SchemaSQL(cfg.PostgresSchema))
			return err
		},
	})
	return cmd
}
