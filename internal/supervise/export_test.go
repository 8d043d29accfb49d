package supervise

// WatchdogPID is the process ID of the watchdog.
func (rr *Runner) WatchdogPID() int { return rr.r.wd.Process.Pid }
