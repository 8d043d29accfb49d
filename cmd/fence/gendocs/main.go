// Command gendocs writes fence's generated documentation from its command
// tree (internal/cli), under DIR (default ., the repository root):
//
//	docs/cli/*.md     a markdown reference page per command
//	docs/man/*.1      a man page per command
//	completions/      fence.bash, fence.zsh, fence.fish, fence.ps1
//
// Run it from the repository root after changing a command:
//
//	go run ./cmd/fence/gendocs .
//
// It is a program of its own, not a fence subcommand, so that cobra/doc and
// its markdown and man renderers (go-md2man, blackfriday) are not linked into
// fence: their package initialisation would be paid by every fence process,
// the watchdog of each `fence run` included. TestGeneratedDocsAreCurrent
// fails when the committed files differ from what it writes.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra/doc"

	"github.com/fence-dev/fence/internal/cli"
)

func main() {
	dir := "."
	switch len(os.Args) {
	case 1:
	case 2:
		dir = os.Args[1]
	default:
		fmt.Fprintln(os.Stderr, "usage: go run ./cmd/fence/gendocs [DIR]")
		os.Exit(2)
	}
	if err := GenDocs(dir); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "gendocs: wrote %s\n", strings.Join([]string{
		filepath.Join(dir, "docs", "cli"), filepath.Join(dir, "docs", "man"), filepath.Join(dir, "completions"),
	}, ", "))
}

// docsDate is the date printed in the man pages. It is fixed so that the
// generated files change only when the commands do.
var docsDate = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// GenDocs writes the generated files under dir from the command tree of
// cli.NewRootCmd, so that every command (including ones registered later) is
// covered. Stale generated files are removed first.
func GenDocs(dir string) error {
	root := cli.NewRootCmd(cli.NewFactory(cli.Test(nil, nil)))
	mdDir := filepath.Join(dir, "docs", "cli")
	manDir := filepath.Join(dir, "docs", "man")
	compDir := filepath.Join(dir, "completions")
	for _, d := range []struct{ dir, glob string }{{mdDir, "*.md"}, {manDir, "*.1"}, {compDir, "fence.*"}} {
		if err := os.MkdirAll(d.dir, 0o755); err != nil {
			return err
		}
		old, _ := filepath.Glob(filepath.Join(d.dir, d.glob))
		for _, p := range old {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	if err := doc.GenMarkdownTree(root, mdDir); err != nil {
		return fmt.Errorf("markdown: %w", err)
	}
	header := &doc.GenManHeader{Title: "FENCE", Section: "1", Source: "fence", Manual: "fence manual", Date: &docsDate}
	if err := doc.GenManTree(root, header, manDir); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	gens := []struct {
		name string
		gen  func(*os.File) error
	}{
		{"fence.bash", func(f *os.File) error { return root.GenBashCompletionV2(f, true) }},
		{"fence.zsh", func(f *os.File) error { return root.GenZshCompletion(f) }},
		{"fence.fish", func(f *os.File) error { return root.GenFishCompletion(f, true) }},
		{"fence.ps1", func(f *os.File) error { return root.GenPowerShellCompletionWithDesc(f) }},
	}
	for _, g := range gens {
		f, err := os.Create(filepath.Join(compDir, g.name))
		if err != nil {
			return err
		}
		err = g.gen(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("completion %s: %w", g.name, err)
		}
	}
	return nil
}
