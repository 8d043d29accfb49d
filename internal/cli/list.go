package cli

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/history"
)

type listOptions struct {
	prefix string
	format output.Format
	watch  bool
	held   bool
}

func newCmdList(f *Factory) *cobra.Command {
	o := &listOptions{}
	cmd := &cobra.Command{
		Use:   "list [PREFIX] [-o table|json|yaml] [--watch]",
		Short: "List locks: name, holder, token, TTL left, held for",
		Long: `List the locks whose names start with PREFIX (all by default), sorted by name:
held locks, locks with waiters and, on the local coordinator, free locks that
have a token history.

On a terminal the table is aligned and has a header; piped, each lock is one
line of tab-separated fields (NAME, HOLDER, TOKEN, TTL LEFT, HELD FOR, WAITERS)
with no header, "-" for the fields of a free lock. When any listed lock has an
operator limit ('fence limit', 'fence freeze'), every line gets a seventh
field, LIMIT: "max N", "frozen", or "-" for a lock without one; a script
that reads the fields should not assume six. --held lists only the locks that
a live lease holds.

--watch prints the list again on every change the coordinator reports (on a
terminal it redraws the screen) until interrupted. With -o json each list is
one line (JSON Lines); with -o yaml each is a YAML document.`,
		Example: `  fence list
  fence list deploy/ -o json | jq -r '.[] | select(.held) | .holder'
  fence list --held
  fence list --watch`,
		Args:              prefixArg,
		ValidArgsFunction: completeLocks(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.prefix = strings.Join(args, "")
			return runList(cmd.Context(), f, o)
		},
	}
	formatFlag(cmd, &o.format, output.Table, output.JSON, output.YAML)
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "print the list again on every change, until interrupted")
	cmd.Flags().BoolVar(&o.held, "held", false, "list only the locks a live lease holds (not free locks, nor locks with only waiters)")
	return cmd
}

func runList(ctx context.Context, f *Factory, o *listOptions) error {
	if !o.watch {
		return f.withCoordinator(ctx, func(c history.Recorder) error {
			infos, err := c.List(ctx, o.prefix)
			if err != nil {
				return fmt.Errorf("list: %w", err)
			}
			return printList(f, o.format, o.filter(infos), "")
		})
	}
	ctx, interrupted, stop := interruptible(ctx)
	defer stop()
	err := f.withCoordinator(ctx, func(c history.Recorder) error {
		return watchList(ctx, f, c, o)
	})
	if interrupted() != nil {
		return nil // the normal way to end --watch
	}
	return err
}

// watchList prints the list, then again after every change seen by the
// watch. Changes that arrive together are coalesced into one redraw.
func watchList(ctx context.Context, f *Factory, c coord.Coordinator, o *listOptions) error {
	prefix := o.prefix
	events, err := c.Watch(ctx, prefix) // before the first List: no change is missed
	if err != nil {
		return fmt.Errorf("list --watch: %w", err)
	}
	for {
		infos, err := c.List(ctx, prefix)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("list --watch: %w", err)
		}
		if err := printList(f, o.format, o.filter(infos), c.Describe()); err != nil {
			return err
		}
		if _, ok := <-events; !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("list --watch: the watch ended: %w", coord.ErrUnavailable)
		}
	drain:
		for {
			select {
			case _, ok := <-events:
				if !ok {
					break drain // reported on the next receive
				}
			default:
				break drain
			}
		}
	}
}

// filter keeps the held locks with --held, else every lock.
func (o *listOptions) filter(infos []coord.LockInfo) []coord.LockInfo {
	if !o.held {
		return infos
	}
	return slices.DeleteFunc(slices.Clone(infos), func(i coord.LockInfo) bool { return !i.Held })
}

// clearScreen moves the cursor home and clears the screen.
const clearScreen = "\x1b[H\x1b[2J"

// printList prints the locks; watching is the coordinator's description
// under --watch, else "".
func printList(f *Factory, format output.Format, infos []coord.LockInfo, watching string) error {
	now, watch := f.Now(), watching != ""
	out := f.IO.Out
	tty := f.IO.IsStdoutTTY()
	switch format {
	case output.JSON, output.YAML:
		views := viewsOf(infos, func(i coord.LockInfo) lockView { return newLockView(i, now) })
		switch {
		case format == output.YAML:
			if watch {
				fmt.Fprintln(out, "---")
			}
			return output.WriteYAML(out, views)
		case watch:
			return output.WriteJSONLine(out, views)
		}
		return output.WriteJSON(out, views)
	}
	var rows [][]string
	limited := slices.ContainsFunc(infos, func(i coord.LockInfo) bool { return i.Limit != nil })
	header := listHeader
	if limited {
		header = append(slices.Clip(listHeader), limitHeader)
	}
	for _, info := range infos {
		for _, row := range listRows(info, now) {
			if limited {
				row = append(row, limitCell(info.Limit))
			}
			rows = append(rows, row)
		}
	}
	var buf bytes.Buffer
	if watch && tty {
		buf.WriteString(clearScreen)
		fmt.Fprintf(&buf, "%s  (updated %s)\n\n", output.Clean(watching), now.Format(time.TimeOnly))
	}
	if len(rows) == 0 && tty {
		buf.WriteString("no locks\n")
	} else if err := output.WriteTable(&buf, tty, header, rows); err != nil {
		return err
	}
	if watch && !tty {
		buf.WriteString("\n") // a blank line ends each list
	}
	_, err := out.Write(buf.Bytes())
	return err
}
