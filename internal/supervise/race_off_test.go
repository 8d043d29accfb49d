//go:build linux && !race

package supervise_test

const raceEnabled = false
