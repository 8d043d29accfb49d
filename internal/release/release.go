// Package release names how the shipped fence and fence-monitor binaries are
// built, for the tests and the benchmark harness that build them the same way.
//
// Tags are their build tags. grpcnotrace leaves gRPC's request tracing
// (golang.org/x/net/trace) out: fence never turns it on, and it links
// html/template, whose use of reflect's MethodByName makes the Go linker keep
// every exported method of every type it keeps. Without it, fence is 5.3 MB
// smaller (25.9 → 20.5 MB) and `fence version` starts 0.92× as long.
//
// Invariant: every build of cmd/fence and cmd/fence-monitor that the project
// describes (goreleaser.yaml, the Makefile, the README, .ci/run) uses Tags,
// and such a build keeps the linker's dead-code elimination whole: no
// reachable function calls reflect's Method or MethodByName with a name it
// cannot see (TestReleaseBuilds, in cmd/fence-monitor). A plain `go build`
// or `go install` of cmd/fence works the same, only larger and slower to
// start.
package release

// Tags are the build tags of fence and fence-monitor, as `go build -tags`
// takes them.
const Tags = "grpcnotrace"
