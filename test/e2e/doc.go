// Package e2e holds fence's end-to-end tests: real fence processes (built
// once by TestMain), real signals, an embedded etcd, the local backend and a
// throwaway PostgreSQL, proving the paused-holder story and checking
// concurrent fenced read-modify-write histories with porcupine.
//
// Run them with
//
//	FENCE_REQUIRE_POSTGRES=1 go test ./test/e2e/
//
// Without FENCE_REQUIRE_POSTGRES, the PostgreSQL parts skip when PostgreSQL
// is not installed.
package e2e
