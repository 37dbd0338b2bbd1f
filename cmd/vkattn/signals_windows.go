package main

import (
	"os"
	"syscall"
)

// stopSignals are the signals caught. Windows has no SIGHUP: Go turns
// Ctrl-C and Ctrl-Break into os.Interrupt (SIGINT, exit status 130) and
// the console's closing, logoff and shutdown into SIGTERM.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}
