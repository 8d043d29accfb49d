package cli

// SetStdoutTTY overrides terminal detection.
func (s *IOStreams) SetStdoutTTY(tty bool) { s.outTTY = tty }
