package cli

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/fence-dev/fence/pkg/history"

	"github.com/spf13/cobra"

	"github.com/fence-dev/fence/internal/exitcode"
	"github.com/fence-dev/fence/internal/history/auto"
	"github.com/fence-dev/fence/internal/output"
	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
)

// maxGuardValue bounds a value read from stdin (etcd's default request limit
// is 1.5 MiB).
const maxGuardValue = 1 << 20

func newCmdGuard(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "guard",
		Short: "Fenced writes: a value accepted only with a token at least as large as any accepted before",
		Long: `A guard stores values that can only be written with a fencing token at least as
large as the largest token accepted for the same key, comparing and writing in
one atomic step. A holder that was paused past its lease and wakes up with an
old token is refused (exit 77). Values live beside the coordinator: under the
state directory (local) or under the key prefix (etcd).`,
		Args: noArgs,
		// Runnable, so that "fence guard bogus" is an error (noArgs), not help.
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCmdGuardPut(f), newCmdGuardGet(f))
	return cmd
}

func newCmdGuardPut(f *Factory) *cobra.Command {
	var token, lock string
	cmd := &cobra.Command{
		Use:   "put KEY --token N [VALUE | -]",
		Short: "Write a fenced value (exit 77 when a larger token was accepted)",
		Long: `Write VALUE under KEY with fencing token N. The write is accepted when N is at
least the largest token accepted for KEY so far (so one holder may write many
times), and refused with exit 77 when it is smaller; the accepted token is
named on stderr, and the refusal is recorded in the history of --lock (default
$FENCE_LOCK, which fence run sets for its command). With "-" or no VALUE, the value is read from standard input
(at most 1 MiB).`,
		Example: `  fence run report -- sh -c 'make-report | fence guard put reports/latest --token "$FENCE_TOKEN" -'`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := guard.ValidateKey(key); err != nil {
				return err
			}
			if !cmd.Flags().Changed("token") {
				return usageErrorf("guard put needs --token N (the holder's fencing token, $FENCE_TOKEN in fence run)")
			}
			tok, err := ParseToken(token)
			if err != nil {
				return err
			}
			value, err := guardValue(f.IO.In, args[1:])
			if err != nil {
				return err
			}
			lock = cmp.Or(lock, os.Getenv("FENCE_LOCK")) // set by fence run for its command
			if lock != "" {
				if err := coord.ValidateName(lock); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			return withGuard(ctx, f, func(c history.Recorder, g guard.Guard) error {
				err := g.Put(ctx, key, tok, value)
				var stale *guard.StaleError
				if errors.As(err, &stale) {
					if lock != "" {
						ev := history.Event{Time: f.Now(), Lock: lock, Kind: history.StaleRefused,
							Key: key, Token: stale.Token, AcceptedToken: stale.Accepted}
						if herr := c.Record(ctx, ev); herr != nil {
							f.verbosef("could not record the stale refusal: %v", herr)
						}
					}
					return exitcode.New(exitcode.Stale, fmt.Errorf("stale token %d for %s: token %d was accepted", stale.Token, output.Clean(key), stale.Accepted))
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the writer's fencing token")
	cmd.Flags().StringVar(&lock, "lock", "", "the lock whose history records a refused write (default $FENCE_LOCK)")
	return cmd
}

// guardValue is the value argument, or standard input for "-" or none.
func guardValue(in io.Reader, args []string) ([]byte, error) {
	if len(args) == 1 && args[0] != "-" {
		return []byte(args[0]), nil
	}
	b, err := io.ReadAll(io.LimitReader(in, maxGuardValue+1))
	if err != nil {
		return nil, fmt.Errorf("read the value from standard input: %w", err)
	}
	if len(b) > maxGuardValue {
		return nil, fmt.Errorf("%w: the value on standard input exceeds %d bytes", coord.ErrInvalid, maxGuardValue)
	}
	return b, nil
}

// guardView is guard get's JSON: a key with no value has found false and
// null for the rest, as status -o json prints a free lock (and exits 1).
type guardView struct {
	Key       string  `json:"key" yaml:"key"`
	Found     bool    `json:"found" yaml:"found"`
	Token     *uint64 `json:"token" yaml:"token"`
	Value     *string `json:"value" yaml:"value"`
	Encoding  *string `json:"encoding" yaml:"encoding"` // "utf-8" or "base64"
	UpdatedAt *string `json:"updated_at" yaml:"updated_at"`
}

func newCmdGuardGet(f *Factory) *cobra.Command {
	var format output.Format
	cmd := &cobra.Command{
		Use:   "get KEY [-o text|json]",
		Short: "Print a fenced value and its token (exit 1 when none was written)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := guard.ValidateKey(key); err != nil {
				return err
			}
			return withGuard(cmd.Context(), f, func(_ history.Recorder, g guard.Guard) error {
				v, err := g.Get(cmd.Context(), key)
				if err != nil && !errors.Is(err, guard.ErrNotFound) {
					return err
				}
				view := guardView{Key: key}
				var fields []output.Field
				if err == nil {
					value, encoding := string(v.Data), "utf-8"
					if !utf8.Valid(v.Data) {
						value, encoding = base64.StdEncoding.EncodeToString(v.Data), "base64"
					}
					view = guardView{Key: key, Found: true, Token: &v.Token, Value: &value, Encoding: &encoding, UpdatedAt: output.Time(v.UpdatedAt)}
					fields = []output.Field{{Key: "key", Value: key}, {Key: "token", Value: fmt.Sprint(v.Token)}}
					if !v.UpdatedAt.IsZero() {
						fields = append(fields, output.Field{Key: "updated_at", Value: v.UpdatedAt.UTC().Format(time.RFC3339Nano)})
					}
					fields = append(fields, output.Field{Key: "value", Value: value})
					if encoding != "utf-8" {
						fields = append(fields, output.Field{Key: "encoding", Value: encoding})
					}
				}
				// A key with no value prints its JSON (found false) and no text.
				err = f.write(format, view, func(w io.Writer) error { return output.WriteFields(w, fields) })
				if err != nil || view.Found {
					return err
				}
				return exitcode.New(exitcode.No, fmt.Errorf("no value was written for %s", output.Clean(key)))
			})
		},
	}
	formatFlag(cmd, &format, output.Text, output.JSON)
	return cmd
}

// withGuard opens the coordinator and the guard store beside it.
func withGuard(ctx context.Context, f *Factory, fn func(history.Recorder, guard.Guard) error) error {
	return f.withCoordinator(ctx, func(c history.Recorder) error {
		g, err := auto.Guard(c)
		if err != nil {
			return err
		}
		return fn(c, g)
	})
}
