//go:build !viewer

package main

import "errors"

// viewerBuilt says this binary has the window: without the viewer build
// tag it has not, so that vkattn builds without the X11 headers.
const viewerBuilt = false

func showWindow(viewRequest) error {
	return errors.New("built without the viewer window: build with -tags viewer")
}
