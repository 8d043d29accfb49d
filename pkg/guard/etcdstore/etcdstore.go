// Package etcdstore is the guard store of fence's etcd backend: one key per
// guard key, <prefix>guards/<url.PathEscape(key)>, written by one etcd
// transaction that compares the stored token and puts the new value.
//
// The stored value is JSON whose first field is the token as 20 zero-padded
// decimal digits:
//
//	{"token":"00000000000000000042","data":"<base64>","updated_at":"…"}
//
// so that etcd's byte-wise value comparison orders stored values by token.
// A put with token N is the transaction
//
//	if create_revision(k) == 0                       // new key
//	then put(k, v)
//	else if value(k) > `{"token":"` and value(k) < `{"token":"<N, 20 digits>"~`
//	     then put(k, v)                              // stored token <= N
//	     else get(k)                                 // refused: report the token
//
// which etcd runs atomically; the stored token is at most N exactly when the
// stored value sorts below the bound, because the byte after the digits is
// always `"` followed by `,` or `}`, both below `~`. A foreign value that does
// not start with the token field is never overwritten, and a value that does
// not decode fails reads and refusals with coord.ErrUnavailable.
package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/guard"
	"github.com/fence-dev/fence/pkg/guard/internal/check"
)

// store is a guard.Guard on an etcd cluster.
type store struct {
	cli    *clientv3.Client
	prefix string
}

var _ guard.Guard = (*store)(nil)

// New returns a store that keeps its values under <prefix>guards/ through
// cli ("/fence/" when prefix is empty; a prefix not ending in "/" gets
// one, as etcd.NormalPrefix says, so "/fence" and "/fence/" are one
// namespace). The store does not own cli: closing cli is the caller's
// business.
func New(cli *clientv3.Client, prefix string) guard.Guard {
	return &store{cli: cli, prefix: etcd.NormalPrefix(prefix)}
}

// Key returns the etcd key that holds the value of key.
func (s *store) Key(key string) string {
	return s.prefix + "guards/" + url.PathEscape(key)
}

// tokenField opens every stored value.
const tokenField = `{"token":"`

// record is the stored form; Token must stay the first field.
type record struct {
	Token     string    `json:"token"` // 20 zero-padded digits
	Data      []byte    `json:"data"`
	UpdatedAt time.Time `json:"updated_at"`
}

func padToken(token uint64) string { return fmt.Sprintf("%020d", token) }

// Put implements guard.Guard.
func (s *store) Put(ctx context.Context, key string, token uint64, value []byte) error {
	if err := check.Put(key, token); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	buf, err := json.Marshal(record{Token: padToken(token), Data: value, UpdatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	k := s.Key(key)
	v := string(buf)
	bound := tokenField + padToken(token) + `"~`
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, v)).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{
				clientv3.Compare(clientv3.Value(k), ">", tokenField),
				clientv3.Compare(clientv3.Value(k), "<", bound),
			},
			[]clientv3.Op{clientv3.OpPut(k, v)},
			[]clientv3.Op{clientv3.OpGet(k)},
		)).
		Commit()
	if err != nil {
		return unavailable(ctx, key, err)
	}
	if resp.Succeeded {
		return nil
	}
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseTxn() == nil {
		return fmt.Errorf("%w: guard %q: unexpected transaction response", coord.ErrUnavailable, key)
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		return nil
	}
	if len(inner.Responses) != 1 || inner.Responses[0].GetResponseRange() == nil {
		return fmt.Errorf("%w: guard %q: unexpected transaction response", coord.ErrUnavailable, key)
	}
	kvs := inner.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Deleted between the two comparisons cannot happen inside one
		// transaction; treat it as a failure rather than guess.
		return fmt.Errorf("%w: guard %q: value vanished during the transaction", coord.ErrUnavailable, key)
	}
	cur, err := decode(key, k, kvs[0].Value)
	if err != nil {
		return err
	}
	if cur.Token <= token {
		return fmt.Errorf("%w: guard %q: stored value at %s is not in fence's format; refusing to overwrite it", coord.ErrUnavailable, key, k)
	}
	return &guard.StaleError{Key: key, Token: token, Accepted: cur.Token}
}

// Get implements guard.Guard. The read is linearizable.
func (s *store) Get(ctx context.Context, key string) (guard.Value, error) {
	if err := guard.ValidateKey(key); err != nil {
		return guard.Value{}, err
	}
	k := s.Key(key)
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return guard.Value{}, unavailable(ctx, key, err)
	}
	if len(resp.Kvs) == 0 {
		return guard.Value{}, fmt.Errorf("%w: %q", guard.ErrNotFound, key)
	}
	return decode(key, k, resp.Kvs[0].Value)
}

func decode(key, etcdKey string, raw []byte) (guard.Value, error) {
	corrupt := func(why string) (guard.Value, error) {
		return guard.Value{}, fmt.Errorf("%w: guard %q: stored value at %s is corrupt (%s); refusing to read or overwrite it",
			coord.ErrUnavailable, key, etcdKey, why)
	}
	if !bytes.HasPrefix(raw, []byte(tokenField)) {
		return corrupt("no token field first")
	}
	var rec record
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return corrupt(err.Error())
	}
	if dec.More() {
		return corrupt("trailing data")
	}
	if len(rec.Token) != 20 {
		return corrupt("token is not 20 digits")
	}
	tok, err := strconv.ParseUint(rec.Token, 10, 64)
	if err != nil || check.Token(tok) != nil {
		return corrupt(fmt.Sprintf("bad token %q", rec.Token))
	}
	if rec.Data == nil {
		rec.Data = []byte{}
	}
	return guard.Value{Data: rec.Data, Token: tok, UpdatedAt: rec.UpdatedAt}, nil
}

// unavailable wraps a failed etcd call: the context's own error stays
// visible, anything else is coord.ErrUnavailable.
func unavailable(ctx context.Context, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("guard %q: %w", key, ctxErr)
	}
	return fmt.Errorf("%w: guard %q: %w", coord.ErrUnavailable, key, err)
}
