// Package check validates the arguments of a guard write for the stores.
package check

import (
	"fmt"

	"github.com/fence-dev/fence/pkg/coord"
	"github.com/fence-dev/fence/pkg/guard"
)

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = coord.MaxNameLen

// MaxToken is the largest token a guard accepts: tokens are stored as signed
// 64-bit integers by SQL stores (BIGINT), and no coordinator issues a larger
// one (coord.MaxToken).
const MaxToken = coord.MaxToken

// Token checks a token: 1 to MaxToken. The error wraps coord.ErrInvalid.
func Token(token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: fencing token must be positive", coord.ErrInvalid)
	}
	if token > MaxToken {
		return fmt.Errorf("%w: fencing token %d exceeds the maximum %d", coord.ErrInvalid, token, uint64(MaxToken))
	}
	return nil
}

// Put validates the arguments of a Put; stores call it first.
func Put(key string, token uint64) error {
	if err := guard.ValidateKey(key); err != nil {
		return err
	}
	return Token(token)
}
