//go:build !viewer

package main

import "testing"

// Without the viewer build tag, view says how to get a vkattn that has it.
func TestViewWithoutTheViewerBuild(t *testing.T) {
	checkRefused(t, []string{"view", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy"}, exitFail,
		"build it with 'go build -tags viewer ./cmd/vkattn'", "q.npy")
}
