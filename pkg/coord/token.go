package coord

import "math"

// MaxToken is the largest fencing token a coordinator issues: tokens fit a
// signed 64-bit integer (an SQL BIGINT or SQLite INTEGER column, an etcd
// revision). A lock whose counter has reached it refuses new leases with an
// error wrapping ErrUnavailable; a token never wraps.
const MaxToken = math.MaxInt64
