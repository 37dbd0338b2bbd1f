package parallel

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// Every goroutine runs at the same time (each waits until all have
// started), and the error holds each failure, in order of g.
func TestStart(t *testing.T) {
	const n = 5
	var started sync.WaitGroup
	started.Add(n)
	err := Start(n, func(g int) error {
		started.Done()
		started.Wait()
		if g%2 == 1 {
			return fmt.Errorf("goroutine %d", g)
		}
		return nil
	})()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %v does not join the failures", err)
	}
	var got []string
	for _, e := range joined.Unwrap() {
		got = append(got, e.Error())
	}
	if want := []string{"goroutine 1", "goroutine 3"}; !slices.Equal(got, want) {
		t.Errorf("failures %q, want %q", got, want)
	}
	if err := Start(3, func(int) error { return nil })(); err != nil {
		t.Errorf("no failures: %v", err)
	}
}
