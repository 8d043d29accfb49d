package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
)

func newCmdConfig(f *Factory) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "config [-o table|json|yaml]",
		Short: "Print the effective configuration and where each value came from",
		Long: `Print every setting with its effective value and its source: flag, env
(FENCE_...), file (the config file) or default. The password is shown as
<redacted>. Exits 125, after printing, when the configuration would be refused
when connecting (a plaintext non-loopback endpoint, a password file readable by
others, ...).

Settings, in order of precedence: flags, then the environment (FENCE_ and the
flag name in upper case, '-' as '_'), then the config file (--config, env
FENCE_CONFIG, else $XDG_CONFIG_HOME/fence/config.yaml, then
/etc/fence/config.yaml; keys are the flag names), then the defaults.`,
		Example: `  # /etc/fence/config.yaml
  endpoints: https://etcd-1:2379,https://etcd-2:2379,https://etcd-3:2379
  cacert: /etc/fence/ca.pem
  user: fence
  password-file: /etc/fence/password`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := parseFormat(format, output.Table, output.JSON, output.YAML)
			if err != nil {
				return err
			}
			cfg, err := f.Config()
			if err != nil {
				return err
			}
			verr := cfg.Validate()
			stateDir := ""
			if cfg.Backend() == "local" {
				stateDir = config.DefaultStateDir()
			}
			entries := cfg.Entries(stateDir, coord.DefaultHolder())
			switch format {
			case output.JSON:
				err = output.WriteJSON(f.IO.Out, entries)
			case output.YAML:
				err = output.WriteYAML(f.IO.Out, entries)
			default:
				rows := make([][]string, len(entries))
				for i, e := range entries {
					v := e.Value
					if v == "" {
						v = "-"
					}
					rows[i] = []string{e.Key, v, string(e.Source)}
				}
				err = output.WriteTable(f.IO.Out, f.IO.IsStdoutTTY(), []string{"KEY", "VALUE", "SOURCE"}, rows)
			}
			if err != nil {
				return err
			}
			if verr != nil {
				return fmt.Errorf("the configuration would be refused: %w", verr)
			}
			return nil
		},
	}
	formatFlag(cmd, &format, output.Table, output.JSON, output.YAML)
	return cmd
}
