package supervise

import "strconv"

// String names a phase in the tests' messages.
func (ph phase) String() string {
	switch ph {
	case phaseWaiting:
		return "waiting"
	case phaseRunning:
		return "running"
	case phaseStopping:
		return "stopping"
	case phaseKilling:
		return "killing"
	case phaseDone:
		return "done"
	}
	return "phase(" + strconv.Itoa(int(ph)) + ")"
}
