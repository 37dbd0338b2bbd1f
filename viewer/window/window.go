//go:build viewer

package window

/*
#include <vulkan/vulkan.h>

// From GLFW, compiled into the binary by github.com/go-gl/glfw. Called
// here rather than through go-gl's CreateWindowSurface, which hands the
// handle back as the address of a Go variable that nothing keeps alive.
typedef struct GLFWwindow GLFWwindow;
extern VkResult glfwCreateWindowSurface(VkInstance instance, GLFWwindow *window,
	const VkAllocationCallbacks *allocator, VkSurfaceKHR *surface);

static VkResult vkattn_glfw_surface(void *instance, void *window, void **out) {
	VkSurfaceKHR s = VK_NULL_HANDLE;
	VkResult r = glfwCreateWindowSurface((VkInstance)instance, (GLFWwindow *)window, NULL, &s);
	*out = (void *)s;
	return r;
}
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"unsafe"

	"github.com/go-gl/glfw/v3.3/glfw"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/viewer"
	"github.com/vkattn/vkattn/vk"
)

// Problem is the attention to compute and show: inputs as for
// vkattn.Device.Attention (rank 2 to 4, filled from the left).
type Problem struct {
	Q, K, V                []float32
	QShape, KShape, VShape []int
	Options                vkattn.Options // Run sets WantWeights
}

// Config says where and how to show it.
type Config struct {
	Device        string // as vkattn.Config.Device
	PlanAs        string // as vkattn.Config.PlanAs
	Validation    bool   // the validation layer, as VKATTN_VALIDATION=1 also asks
	Width, Height int    // the window's first size; 0 to fit the picture
	// Log, if not nil, gets a line for every frame shown: what it shows
	// and its size (for scripts and tests).
	Log io.Writer
}

// ErrNoDisplay is wrapped by Run's error when no display can be opened.
var ErrNoDisplay = errors.New("window: no display")

// Run computes p on the device, opens a window on the same device and
// shows one head's weights until the user quits. It must run on the main
// OS thread (GLFW's rule): call runtime.LockOSThread in an init function
// of package main. Everything Run makes is freed when it returns; an
// object left alive is an error.
func Run(p Problem, cfg Config) (err error) {
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return fmt.Errorf("%w: DISPLAY is not set. Run it in a desktop session, or on a virtual X server: "+
			"Xvfb :1 -screen 0 1024x768x24 & DISPLAY=:1 vkattn view ...", ErrNoDisplay)
	}
	if err := initGLFW(); err != nil {
		return err
	}
	defer glfw.Terminate()
	if !glfw.VulkanSupported() {
		return errors.New("window: GLFW found no Vulkan loader (install libvulkan1 and a driver such as mesa-vulkan-drivers)")
	}

	s := &session{cfg: cfg, before: vk.LiveObjects()}
	defer func() {
		if cerr := s.close(); err == nil {
			err = cerr
		}
	}()
	if err := s.open(p); err != nil {
		return err
	}
	s.dirty = true
	for !s.win.ShouldClose() {
		if s.dirty {
			if err := s.draw(); err != nil {
				return err
			}
		}
		if s.dirty {
			glfw.PollEvents() // the swapchain is being remade: draw again soon
		} else {
			glfw.WaitEventsTimeout(1)
		}
	}
	return nil
}

// initGLFW starts GLFW. glfw.Init reports a display it cannot open only in
// the log, and the next GLFW call panics: that call is made here, under
// recover, to turn it into an error.
func initGLFW() (err error) {
	var logged bytes.Buffer
	prev, flags := log.Writer(), log.Flags()
	log.SetOutput(&logged) // go-gl logs GLFW's platform errors
	log.SetFlags(0)
	defer func() { log.SetOutput(prev); log.SetFlags(flags) }()
	if err := glfw.Init(); err != nil {
		return fmt.Errorf("window: GLFW: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			why := bytes.TrimSpace(logged.Bytes())
			if len(why) == 0 {
				why = []byte(fmt.Sprint(r))
			}
			err = fmt.Errorf("%w: cannot open display %q: %s", ErrNoDisplay, os.Getenv("DISPLAY"), why)
		}
	}()
	glfw.GetTime()
	return nil
}

// session is one window and everything on the device behind it.
type session struct {
	cfg    Config
	before int64 // vk.LiveObjects when Run began

	win      *glfw.Window
	inst     *vk.Instance
	dev      *vk.Device
	vdev     *vkattn.Device
	surf     *vk.Surface
	tensors  []*vkattn.Tensor
	out      *vkattn.Output
	painter  *viewer.Painter
	swap     *vk.Swapchain
	cmds     *vk.Commands
	acquired *vk.Semaphore
	rendered []*vk.Semaphore // one per swapchain image, signalled for its present

	view    viewer.View
	dirty   bool // the window needs a new frame
	resized bool // the swapchain must be remade
	shown   bool // a frame of view is on screen
	top     float32
	frames  int
	mouse   struct {
		in   bool
		i, j int
	}
}

// windowSize is cfg's size, or one that gives cells of a few to 48 pixels.
func windowSize(L, S int, cfg Config) (int, int) {
	if cfg.Width > 0 && cfg.Height > 0 {
		return cfg.Width, cfg.Height
	}
	cell := min(max(512/max(L, S), 2), 48)
	return min(max(S*cell, 160), 1600), min(max(L*cell, 120), 1200)
}

func (s *session) open(p Problem) error {
	p.Options.WantWeights = true
	q4, err := vkattn.Shape4(p.QShape)
	if err != nil {
		return fmt.Errorf("Q: %w", err)
	}
	k4, err := vkattn.Shape4(p.KShape)
	if err != nil {
		return fmt.Errorf("K: %w", err)
	}

	glfw.WindowHint(glfw.ClientAPI, glfw.NoAPI) // Vulkan draws, not GL
	glfw.WindowHint(glfw.Resizable, glfw.True)
	w, h := windowSize(q4[2], k4[2], s.cfg)
	if s.win, err = glfw.CreateWindow(w, h, "vkattn view", nil, nil); err != nil {
		return fmt.Errorf("window: %w", err)
	}
	exts := s.win.GetRequiredInstanceExtensions()
	if len(exts) == 0 {
		return errors.New("window: GLFW knows no Vulkan surface extension for this display")
	}
	validation := s.cfg.Validation || os.Getenv("VKATTN_VALIDATION") == "1"
	if s.inst, err = vk.NewInstance(vk.InstanceConfig{Validation: validation, Extensions: exts}); err != nil {
		return err
	}
	win := s.win.Handle()
	s.surf, err = s.inst.NewSurface(func(instance unsafe.Pointer) (unsafe.Pointer, error) {
		var out unsafe.Pointer
		if r := C.vkattn_glfw_surface(instance, win, &out); r != C.VK_SUCCESS {
			return nil, fmt.Errorf("window: glfwCreateWindowSurface failed: VkResult %d", r)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	idx, err := s.inst.FindDevice(s.cfg.Device)
	if err != nil {
		return err
	}
	if s.dev, err = s.inst.NewDeviceWith(idx, vk.DeviceConfig{Extensions: []string{vk.SwapchainExtension}, Present: s.surf}); err != nil {
		return err
	}
	if s.vdev, err = vkattn.OpenOn(viewer.Shared(s.dev), vkattn.Config{PlanAs: s.cfg.PlanAs}); err != nil {
		return err
	}

	for _, in := range []struct {
		shape []int
		data  []float32
	}{{p.QShape, p.Q}, {p.KShape, p.K}, {p.VShape, p.V}} {
		t, err := s.vdev.Upload(in.shape, in.data)
		if err != nil {
			return err
		}
		s.tensors = append(s.tensors, t)
	}
	if s.out, err = s.vdev.Attention(s.tensors[0], s.tensors[1], s.tensors[2], p.Options); err != nil {
		return err
	}
	if s.painter, err = viewer.NewPainter(s.dev, s.out.Weights, s.tensors[2]); err != nil {
		return err
	}
	if s.cmds, err = s.dev.NewCommands(0); err != nil {
		return err
	}
	if s.acquired, err = s.dev.NewSemaphore(); err != nil {
		return err
	}

	s.win.SetKeyCallback(s.onKey)
	s.win.SetFramebufferSizeCallback(func(*glfw.Window, int, int) { s.resized, s.dirty = true, true })
	s.win.SetRefreshCallback(func(*glfw.Window) { s.dirty = true })
	s.win.SetCursorPosCallback(s.onCursor)
	s.win.SetCursorEnterCallback(func(_ *glfw.Window, entered bool) {
		if !entered {
			s.mouse.in = false
			s.setTitle()
		}
	})
	return nil
}

func (s *session) onKey(w *glfw.Window, key glfw.Key, _ int, action glfw.Action, _ glfw.ModifierKey) {
	if action == glfw.Release {
		return
	}
	pt, v := s.painter, s.view
	switch key {
	case glfw.KeyN, glfw.KeyRight, glfw.KeyDown:
		v.Head = (v.Head + 1) % pt.H
	case glfw.KeyP, glfw.KeyLeft, glfw.KeyUp:
		v.Head = (v.Head + pt.H - 1) % pt.H
	case glfw.KeyB:
		v.Batch = (v.Batch + 1) % pt.B
	case glfw.KeyC:
		v.Contribution = !v.Contribution
	case glfw.KeyQ, glfw.KeyEscape:
		w.SetShouldClose(true)
		return
	default:
		return
	}
	if v != s.view {
		s.view, s.dirty, s.shown = v, true, false
	}
}

// onCursor maps the cursor to the cell under it as the blit maps pixels:
// pixel column x shows key floor((x + 0.5) * S / width).
func (s *session) onCursor(w *glfw.Window, x, y float64) {
	ww, wh := w.GetSize()
	pt := s.painter
	s.mouse.in = x >= 0 && y >= 0 && int(x) < ww && int(y) < wh
	if s.mouse.in {
		s.mouse.j = min(int((float64(int(x))+0.5)*float64(pt.S)/float64(ww)), pt.S-1)
		s.mouse.i = min(int((float64(int(y))+0.5)*float64(pt.L)/float64(wh)), pt.L-1)
	}
	s.setTitle()
}

// setTitle says what is shown and, once the frame is on screen, the cell
// under the mouse (its value is read from the device).
func (s *session) setTitle() {
	pt, v := s.painter, s.view
	what := "weights a_ij"
	if v.Contribution {
		what = "contributions a_ij*||v_j||"
	}
	title := fmt.Sprintf("vkattn view | batch %d/%d | head %d/%d | %s, scale 0 to %.4g", v.Batch, pt.B, v.Head, pt.H, what, s.top)
	if s.mouse.in && s.shown {
		if x, err := pt.Value(v, s.mouse.i, s.mouse.j); err == nil {
			title += fmt.Sprintf(" | query %d, key %d: %.4g", s.mouse.i, s.mouse.j, x)
		}
	}
	s.win.SetTitle(title)
}

// recreate makes a swapchain of the window's size (after a resize), and a
// present semaphore per image.
func (s *session) recreate(w, h int) error {
	if err := s.dev.WaitIdle(); err != nil {
		return err
	}
	swap, err := s.dev.NewSwapchain(s.surf, uint32(w), uint32(h), s.swap)
	s.swap.Close() // retired by the new one, or useless after a failure
	s.swap = swap
	for _, r := range s.rendered {
		r.Close()
	}
	s.rendered = nil
	if err != nil {
		return err
	}
	for range swap.Images {
		r, err := s.dev.NewSemaphore()
		if err != nil {
			return err
		}
		s.rendered = append(s.rendered, r)
	}
	s.resized = false
	return nil
}

// draw colours the view on the device and blits it to the next window
// image. An out-of-date swapchain leaves the window dirty, to be drawn
// again after the swapchain is remade.
func (s *session) draw() error {
	fw, fh := s.win.GetFramebufferSize()
	if fw == 0 || fh == 0 {
		s.dirty = false // minimized: the resize that restores it redraws
		return nil
	}
	if s.swap == nil || s.resized || uint32(fw) != s.swap.Width || uint32(fh) != s.swap.Height {
		if err := s.recreate(fw, fh); err != nil {
			if errors.Is(err, vk.ErrOutOfDate) {
				s.resized = true
				return nil
			}
			return err
		}
	}
	idx, err := s.swap.Acquire(s.acquired)
	if errors.Is(err, vk.ErrOutOfDate) {
		s.resized = true
		return nil
	}
	if err != nil {
		return err
	}
	c, img := s.cmds, s.swap.Images[idx]
	if err := c.Begin(); err != nil {
		return err
	}
	if err := s.painter.Record(c, s.view); err != nil {
		return err
	}
	c.Transition(img, vk.LayoutUndefined, vk.LayoutTransferDst)
	c.Blit(s.painter.Image, img)
	c.Transition(img, vk.LayoutTransferDst, vk.LayoutPresent)
	if err := c.End(); err != nil {
		return err
	}
	if err := c.SubmitSignal(s.acquired, s.rendered[idx]); err != nil {
		return err
	}
	if err := c.Wait(context.Background()); err != nil {
		return err
	}
	err = s.swap.Present(idx, s.rendered[idx])
	if errors.Is(err, vk.ErrOutOfDate) {
		s.resized = true
		return nil
	}
	if err != nil {
		return err
	}
	s.dirty, s.shown = false, true
	s.frames++
	if s.top, err = s.painter.Top(); err != nil {
		return err
	}
	s.setTitle()
	if s.cfg.Log != nil {
		mode := "weights"
		if s.view.Contribution {
			mode = "contribution"
		}
		fmt.Fprintf(s.cfg.Log, "frame %d: batch %d head %d %s top %.6g size %dx%d\n",
			s.frames, s.view.Batch, s.view.Head, mode, s.top, s.swap.Width, s.swap.Height)
	}
	return nil
}

// close frees everything in order (the swapchain before its surface, the
// surface before the instance) and reports objects left alive.
func (s *session) close() error {
	if s.dev != nil {
		s.dev.WaitIdle()
	}
	s.cmds.Close()
	s.acquired.Close()
	for _, r := range s.rendered {
		r.Close()
	}
	s.swap.Close()
	s.painter.Close()
	s.out.Close()
	for _, t := range s.tensors {
		t.Close()
	}
	s.surf.Close()
	var err error
	switch {
	case s.dev != nil:
		err = errors.Join(s.vdev.Close(), s.dev.Close()) // vkattn's objects, then the device
		s.inst.Close()
	default:
		s.inst.Close()
	}
	if s.win != nil {
		s.win.Destroy()
	}
	if n := vk.LiveObjects() - s.before; n != 0 && err == nil {
		err = fmt.Errorf("window: %d Vulkan objects left alive on exit", n)
	}
	return err
}
