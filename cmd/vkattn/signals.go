package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Signals: SIGINT, SIGTERM and SIGHUP (on Windows: Ctrl-C and Ctrl-Break,
// which Go delivers as os.Interrupt, and closing the console, logging off
// or shutting down, as SIGTERM) end every command the same way. The
// first one removes the temporary files of outputs not yet in place, then
// either cancels the context the interruptible work measures under (bench,
// tune, decode: they stop at the next dispatch and report what they have)
// or, when no such work runs, exits at once. A second signal exits at
// once, leaving the device to the OS. The exit status is 128 + the signal
// number (130 for SIGINT).

// errInterrupted is why an output is not written after a signal.
var errInterrupted = errors.New("interrupted by a signal")

// signalState is the process-wide registry: temporary files, the
// interruptible work's context, the signal received.
type signalState struct {
	mu      sync.Mutex
	temps   map[string]bool // temporary output files not yet renamed
	got     os.Signal       // the first signal; nil before
	holders int             // interruptible work under way (interruptible)
	notes   []stopNote      // what that work says when interrupted
	ctx     context.Context
	cancel  context.CancelFunc
	stderr  io.Writer
}

var signals = newSignalState()

func newSignalState() *signalState {
	ctx, cancel := context.WithCancel(context.Background())
	return &signalState{temps: map[string]bool{}, ctx: ctx, cancel: cancel, stderr: io.Discard}
}

// catchSignals installs the handler; main calls it once, before any work.
func catchSignals(stderr io.Writer) {
	signals.mu.Lock()
	signals.stderr = stderr
	signals.mu.Unlock()
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, stopSignals...)
	go func() {
		for s := range ch {
			signals.received(s)
		}
	}()
}

// signalStatus is the exit status for dying of s.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFail
}

// exitStatus is what the process exits with after a command returned
// code: 128 + the signal number if a signal interrupted it.
func exitStatus(code int) int {
	signals.mu.Lock()
	defer signals.mu.Unlock()
	if signals.got != nil {
		return signalStatus(signals.got)
	}
	return code
}

func (s *signalState) received(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tmp := range s.temps {
		os.Remove(tmp)
	}
	clear(s.temps)
	first := s.got == nil
	if first {
		s.got = sig
	}
	if !first || s.holders == 0 {
		// The lock stays held: no temporary file can be made after this.
		os.Exit(signalStatus(sig))
	}
	s.cancel()
	who, msg := "vkattn", "stopping"
	for _, n := range s.notes {
		if n.cmd == "" {
			continue
		}
		who = "vkattn " + n.cmd
		if n.say != nil {
			msg = n.say()
		}
	}
	fmt.Fprintf(s.stderr, "%s: %v: %s; a second signal quits at once\n", who, sig, msg)
}

// stopNote is what a command's interruptible work says when a signal
// stops it; cmd "" once that work is over.
type stopNote struct {
	cmd string
	say func() string
}

// interruptible is the context the work of command cmd (bench, tune,
// decode) runs under: the first signal cancels it instead of ending the
// process, so the work stops and reports what it measured. note, if not
// nil, says on stderr then what the stop waits for. stop ends the
// interruptible part: later, a signal exits at once.
func interruptible(cmd string, note func() string) (context.Context, context.CancelFunc) {
	s := signals
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holders++
	i := len(s.notes)
	s.notes = append(s.notes, stopNote{cmd, note})
	var once sync.Once
	return s.ctx, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.holders--
			s.notes[i] = stopNote{}
		})
	}
}

// interrupted reports whether a signal has arrived.
func interrupted() bool {
	signals.mu.Lock()
	defer signals.mu.Unlock()
	return signals.got != nil
}

// createTemp makes a temporary file as os.CreateTemp does and registers
// it, so a signal removes it; none is made once a signal has arrived.
func createTemp(dir, pattern string) (*os.File, error) {
	s := signals
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got != nil {
		return nil, errInterrupted
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	s.temps[f.Name()] = true
	return f, nil
}

// holdSignals runs fn, which puts the registered temporary files temps in
// place or removes them, unless a signal has arrived (they were removed
// then). A signal that comes while fn runs waits for it, so the process
// never dies with some outputs of a command in place and others not.
func holdSignals(temps []string, fn func() error) error {
	s := signals
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.got != nil {
		return errInterrupted
	}
	for _, tmp := range temps {
		delete(s.temps, tmp)
	}
	return fn()
}

// removeTemp removes a registered temporary file.
func removeTemp(tmp string) {
	s := signals
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.temps, tmp)
	os.Remove(tmp)
}
