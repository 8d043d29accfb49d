# Convenience targets; CI runs .ci/run.
GO ?= go

.PHONY: build test race docs fuzz release-check

build:
	CGO_ENABLED=0 $(GO) build -o fence ./cmd/fence

test:
	$(GO) test ./...

race:
	$(GO) test -race ./pkg/... ./internal/supervise/... ./internal/config/...

# Regenerate docs/cli, docs/man and completions/ from the command tree, and
# the licences of the modules compiled in (packaging/). TestGeneratedDocsAreCurrent
# and TestLicensesAreCurrent fail when they are stale.
docs:
	$(GO) run ./cmd/fence/gendocs .
	$(GO) run ./cmd/fence/genlicenses .

fuzz:
	$(GO) test ./internal/cli -run '^$$' -fuzz FuzzParseLockName -fuzztime 30s
	$(GO) test ./internal/cli -run '^$$' -fuzz FuzzParseToken -fuzztime 15s
	$(GO) test ./internal/config -run '^$$' -fuzz FuzzParseDuration -fuzztime 30s

release-check:
	goreleaser check
	goreleaser release --snapshot --clean --skip=publish
