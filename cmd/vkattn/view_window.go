//go:build viewer

package main

import (
	"runtime"

	"github.com/vkattn/vkattn/viewer/window"
)

// GLFW runs on the main OS thread only: keep main's goroutine there.
func init() { runtime.LockOSThread() }

// viewerBuilt says this binary has the window (the viewer build tag).
const viewerBuilt = true

// showWindow opens the viewer's window on r's problem until the user quits.
func showWindow(r viewRequest) error {
	p := r.problem
	return window.Run(window.Problem{
		Q: p.q.F32, K: p.k.F32, V: p.v.F32,
		QShape: p.q.Shape, KShape: p.k.Shape, VShape: p.v.Shape,
		Options: p.opts,
	}, window.Config{Device: r.device.name, PlanAs: r.device.planAs, Width: r.width, Height: r.height, Log: r.log})
}
