package main

import (
	"io"
	"strconv"
	"strings"
)

const viewUsage = `Usage: vkattn view -q Q.npy -k K.npy -v V.npy [flags]

Opens a window showing the attention weights of one head, computed on the
Vulkan device and drawn from it: the window's swapchain is on the same
device, a compute pass colours the weights with the heat-map palette
('vkattn heatmap -h') into an image that is blitted to the window, and the
weights never pass through the host. Query 0 is the top row, key 0 the
left column; the colour scale runs from 0 (black) to the head's largest
value (white). Resize the window as you like.

Keys:
  n / p (or the arrow keys)  next / previous head
  b                          next batch item
  c                          weights a_ij <-> value contributions a_ij * ||v_j||
  q / Escape                 quit
The title shows the batch item, the head, the colour scale, and the query,
key and value under the mouse.

Inputs and masks are those of 'vkattn run' (see 'vkattn run -h'). With
--dtype or --kv-dtype the inputs are rounded to that type, so the window
shows the rounded problem, but it keeps them as float32 on the device (the
contribution view reads V as float32).

It needs a display (DISPLAY set; without one it fails at once, saying so)
and a vkattn built with the viewer, which needs the X11 headers:
  go build -tags viewer ./cmd/vkattn     # or: make build
On a machine without a screen, a virtual X server works:
  Xvfb :1 -screen 0 1024x768x24 & DISPLAY=:1 vkattn view ...

Examples:
  vkattn view -q q.npy -k k.npy -v v.npy
  vkattn view -q q.npy -k k.npy -v v.npy --causal bottom-right --size 800x600
`

// viewFlags are view's command line: run's inputs and masks, and the window.
type viewFlags struct {
	runFlags
	size string
	log  bool
}

// viewRequest is what the window gets: the loaded problem and how to show it.
type viewRequest struct {
	problem       *problem
	device        deviceChoice
	width, height int
	log           io.Writer // a line per frame shown, or nil
}

func runView(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("view", stderr)
	var f viewFlags
	f.problemFlags(fs)
	fs.StringVar(&f.size, "size", "", "the window's first size `WxH` in pixels (default: fits the weights)")
	fs.BoolVar(&f.log, "log", false, "print a line for every frame shown (for scripts)")
	if ok, code := parseFlags(fs, viewUsage, args, stdout, stderr); !ok {
		return code
	}
	if !viewerBuilt {
		return failf(stderr, "view", "this vkattn was built without the viewer window (it needs the X11 headers); "+
			"build it with 'go build -tags viewer ./cmd/vkattn' or 'make build', which installs them")
	}
	if f.missing() {
		return usagef(stderr, "view", "-q, -k and -v are required")
	}
	req := viewRequest{device: f.device}
	if f.size != "" {
		w, h, ok := parseSize(f.size)
		if !ok {
			return usagef(stderr, "view", "--size %q: want WIDTHxHEIGHT in pixels, e.g. 800x600", f.size)
		}
		req.width, req.height = w, h
	}
	if f.log {
		req.log = stdout
	}
	causal, err := f.checkProblemFlags()
	if err != nil {
		return usagef(stderr, "view", "%v", err)
	}
	if req.problem, err = loadProblem(&f.runFlags, causal); err != nil {
		return failf(stderr, "view", "%v", err)
	}
	if err := showWindow(req); err != nil {
		return failf(stderr, "view", "%v", err)
	}
	return exitOK
}

// parseSize reads WxH.
func parseSize(s string) (w, h int, ok bool) {
	ws, hs, found := strings.Cut(strings.ToLower(s), "x")
	if !found {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if err1 != nil || err2 != nil || w < 1 || h < 1 || w > 16384 || h > 16384 {
		return 0, 0, false
	}
	return w, h, true
}
