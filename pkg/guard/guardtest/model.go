package guardtest

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// Input is one operation on a guard, as recorded in a history checked with
// Model: a put (Put true) or a get.
type Input struct {
	Put   bool
	Key   string
	Token uint64 // put only
	Data  string // put only
}

// Output is the outcome of an operation.
type Output struct {
	// Unknown: the operation failed without a definite answer (a timeout, a
	// killed client): a put may or may not have taken effect; a get says
	// nothing.
	Unknown bool

	// Put: Accepted, or Stale with the accepted token the store reported.
	Accepted      bool
	Stale         bool
	StaleAccepted uint64

	// Get: Found, with the stored token and data.
	Found bool
	Token uint64
	Data  string
}

// state is the model's state for one key.
type state struct {
	Found bool
	Token uint64
	Data  string
}

// Model is the sequential specification of a fenced register per key, for
// porcupine: a put is accepted exactly when its token is at least the stored
// token (any token when nothing is stored) and then stores its data and
// token; a refused put reports the stored token and changes nothing; a get
// returns what is stored. Operations with Unknown outcomes may or may not
// have taken effect. The history is partitioned by key.
func Model() porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			for _, op := range history {
				k := op.Input.(Input).Key
				byKey[k] = append(byKey[k], op)
			}
			keys := make([]string, 0, len(byKey))
			for k := range byKey {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []any { return []any{state{}} },
		Step: func(st, in, out any) []any {
			s, i, o := st.(state), in.(Input), out.(Output)
			if !i.Put {
				switch {
				case o.Unknown:
					return []any{s}
				case o.Found == s.Found && o.Token == s.Token && o.Data == s.Data:
					return []any{s}
				}
				return nil
			}
			ok := !s.Found || i.Token >= s.Token
			next := state{Found: true, Token: i.Token, Data: i.Data}
			switch {
			case o.Unknown:
				if ok {
					return []any{s, next}
				}
				return []any{s}
			case o.Accepted && ok:
				return []any{next}
			case o.Stale && !ok && o.StaleAccepted == s.Token:
				return []any{s}
			}
			return nil
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(Input), out.(Output)
			var res string
			switch {
			case o.Unknown:
				res = "?"
			case i.Put && o.Accepted:
				res = "ok"
			case i.Put:
				res = fmt.Sprintf("stale (accepted %d)", o.StaleAccepted)
			case o.Found:
				res = fmt.Sprintf("%q@%d", o.Data, o.Token)
			default:
				res = "not found"
			}
			if i.Put {
				return fmt.Sprintf("put(%q, %d, %q) -> %s", i.Key, i.Token, i.Data, res)
			}
			return fmt.Sprintf("get(%q) -> %s", i.Key, res)
		},
		DescribeState: func(st any) string {
			s := st.(state)
			if !s.Found {
				return "empty"
			}
			return fmt.Sprintf("%q@%d", s.Data, s.Token)
		},
	}
	return m.ToModel()
}
