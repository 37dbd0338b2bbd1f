// Package window shows attention weights in a window: GLFW makes the
// window, vk a surface and swapchain on the device that computes the
// weights, and viewer.Painter's picture is blitted to the swapchain image,
// so the weights never pass through the host.
//
// GLFW needs the X11 (and GL) headers to build, which a headless machine
// need not have, so everything but this comment is built only with the
// "viewer" build tag:
//
//	go build -tags viewer ./cmd/vkattn
//
// Without the tag the package is empty and `go build ./...` works without
// the headers.
package window
