# Convenience targets; CI runs .ci/run.
GO ?= go

.PHONY: build test race docs fuzz release-check

build:
	$(GO) build -o bin/fence ./cmd/fence

test:
	$(GO) test ./...

race:
	$(GO) test -race ./cmd/... ./pkg/cli/... ./pkg/config/... ./pkg/output/... ./pkg/exitcode/...

# Regenerate docs/cli, docs/man and completions/ from the command tree.
# TestGeneratedDocsAreCurrent (pkg/cli) fails when they are stale.
docs:
	$(GO) run ./cmd/fence gen-docs .

fuzz:
	$(GO) test ./pkg/cli -run '^$$' -fuzz FuzzParseLockName -fuzztime 30s
	$(GO) test ./pkg/cli -run '^$$' -fuzz FuzzParseToken -fuzztime 15s
	$(GO) test ./pkg/config -run '^$$' -fuzz FuzzParseDuration -fuzztime 30s

release-check:
	goreleaser check
	goreleaser release --snapshot --clean --skip=publish
