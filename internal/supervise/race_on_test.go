//go:build linux && race

package supervise_test

// raceEnabled: the race detector slows each process start several times.
const raceEnabled = true
