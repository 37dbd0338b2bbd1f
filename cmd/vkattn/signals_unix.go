//go:build !windows

package main

import (
	"os"
	"syscall"
)

// stopSignals are the signals caught.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
