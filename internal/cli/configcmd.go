package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/config"
	"github.com/fence-dev/fence/internal/etcdbugs"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
)

func newCmdConfig(f *Factory) *cobra.Command {
	var format output.Format
	cmd := &cobra.Command{
		Use:   "config [-o table|json|yaml]",
		Short: "Print the effective configuration and where each value came from",
		Long: `Print every setting with its effective value and its source: flag, env
(FENCE_...), file and the config file it came from, or default. The password is shown as
<redacted>. Exits 125, after printing, when the configuration would be refused
when connecting (a plaintext non-loopback endpoint, a password file readable by
others, ...). With etcd endpoints it also asks every member for its version
(the server-versions row, waiting up to a second for every member's answer)
and warns on stderr about a version with a known lease-safety bug
(docs/operations.md lists them); every other command warns too, when the
answer came in time, without waiting for it: one line for the cluster, at
most once a day on a host, hidden by --log-level error and -q.

Settings, in order of precedence: flags, then the environment (FENCE_ and the
flag name in upper case, '-' as '_'), then the config files, then the
defaults. The config files are merged key by key, as git and ssh do:
/etc/fence/config.yaml, then $XDG_CONFIG_HOME/fence/config.yaml
(~/.config/fence/config.yaml), then --config (env FENCE_CONFIG); a later file
overrides only the keys it holds. Keys are the flag names. The config row
lists the files read, in that order.`,
		Example: `  # /etc/fence/config.yaml
  endpoints: https://etcd-1:2379,https://etcd-2:2379,https://etcd-3:2379
  cacert: /etc/fence/ca.pem
  user: fence
  password-file: /etc/fence/password`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
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
			if cfg.Backend() == "etcd" && verr == nil {
				entries = append(entries, f.serverVersions(cmd.Context()))
			}
			err = f.write(format, entries, func(w io.Writer) error {
				rows := viewsOf(entries, func(e config.Entry) []string {
					src := string(e.Source)
					if e.File != "" {
						src += " " + e.File
					}
					return []string{e.Key, cmp.Or(e.Value, "-"), src}
				})
				return output.WriteTable(w, f.IO.IsStdoutTTY(), []string{"KEY", "VALUE", "SOURCE"}, rows)
			})
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

// serverVersions is fence config's row of the etcd members' versions
// ("host:port=3.4.23 (etcd#15247)" for one with a known lease-safety bug;
// the warnings themselves go to stderr).
func (f *Factory) serverVersions(ctx context.Context) config.Entry {
	e := config.Entry{Key: "server-versions", Source: config.Source("server")}
	c, err := f.Coordinator(ctx)
	if err != nil {
		e.Value = "unreachable: " + err.Error()
		return e
	}
	defer c.Close()
	f.versions.await() // the row shows them: the whole answer
	f.printVersions(nil, true, false)
	var parts []string
	for _, v := range f.versions.versions {
		p := strings.TrimPrefix(strings.TrimPrefix(v.Endpoint, "http://"), "https://") + "="
		if v.Err != nil {
			p += "?"
		} else {
			p += v.Version
			if bugs := etcdbugs.BugsOf(v.Version); len(bugs) > 0 {
				p += " (lease-safety bug " + strings.Join(viewsOf(bugs, func(b etcdbugs.LeaseBug) string { return b.Issue }), ", ") + ")"
			}
		}
		parts = append(parts, p)
	}
	e.Value = strings.Join(parts, ",")
	return e
}
