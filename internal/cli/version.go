package cli

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/output"
)

// Build information, set at link time:
//
//	-ldflags "-X github.com/fence-dev/fence/internal/cli.Version=v1.2.3 -X ...cli.Commit=abc -X ...cli.Date=2026-01-02T03:04:05Z"
//
// Without it, the module version and VCS revision recorded by the Go
// toolchain are used where known.
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

type versionView struct {
	Version string `json:"version" yaml:"version"`
	Commit  string `json:"commit" yaml:"commit"`
	Date    string `json:"date" yaml:"date"`
	Go      string `json:"go" yaml:"go"`
	OS      string `json:"os" yaml:"os"`
	Arch    string `json:"arch" yaml:"arch"`
}

func buildInfo() versionView {
	v := versionView{Version: Version, Commit: Commit, Date: Date, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && v.Commit == "":
				v.Commit = s.Value
			case s.Key == "vcs.time" && v.Date == "":
				v.Date = s.Value
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

func newCmdVersion(f *Factory) *cobra.Command {
	var format output.Format
	cmd := &cobra.Command{
		Use:   "version [-o text|json]",
		Short: "Print fence's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := buildInfo()
			commit := cmp.Or(v.Commit[:min(len(v.Commit), 12)], "unknown")
			return f.write(format, v, textLine(fmt.Sprintf("fence %s (commit %s, %s %s/%s)", v.Version, commit, v.Go, v.OS, v.Arch)))
		},
	}
	formatFlag(cmd, &format, output.Text, output.JSON)
	return cmd
}
