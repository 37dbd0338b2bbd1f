// Package parallel runs the goroutines of the concurrency tests: the root
// package's and vk's share one way of starting them and collecting errors.
package parallel

import (
	"errors"
	"sync"
)

// Start calls work(g) for g = 0..n-1, each in its own goroutine, and
// returns a function that waits for all of them and joins their errors
// (nil when every one returned nil).
func Start(n int, work func(g int) error) (wait func() error) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { errs[g] = work(g) })
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}
