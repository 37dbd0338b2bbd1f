//go:build viewer && linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/heatmap"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
)

// The window tests run `vkattn view` as a child process (this test binary,
// through TestMain's VKATTN_TEST_CLI_ARGS: GLFW wants the main thread) on
// a virtual X server, drive it with xdotool and read it with screenshots.

// needTools fails the test when the X tools are missing: make test
// installs them (tools/deps.sh), so their absence is a broken setup.
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"Xvfb", "xdotool", "import"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (tools/deps.sh installs xvfb, xdotool and imagemagick): %v", tool, err)
		}
	}
}

// startXvfb starts a virtual X server on a free display and returns the
// display's name (":N"); it is stopped when the test ends.
func startXvfb(t *testing.T) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// -displayfd: the server picks a free display and writes its number.
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-noreset", "-nolisten", "tcp", "-screen", "0", "640x480x24")
	cmd.ExtraFiles = []*os.File{w}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	num := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		num <- strings.TrimSpace(line)
	}()
	select {
	case n := <-num:
		if n == "" {
			t.Fatalf("Xvfb did not start: %s", errOut.String())
		}
		return ":" + n
	case <-time.After(20 * time.Second):
		t.Fatalf("Xvfb did not report a display in 20 s: %s", errOut.String())
	}
	return ""
}

// viewChild is a running `vkattn view`.
type viewChild struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
	done   chan error
	disp   string
}

// startView runs `vkattn view args...` on display disp with validation on.
func startView(t *testing.T, disp string, args ...string) *viewChild {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	argv, _ := json.Marshal(append([]string{"view"}, args...))
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(envWithout("DISPLAY"), "DISPLAY="+disp, "VKATTN_VALIDATION=1", "VKATTN_TEST_CLI_ARGS="+string(argv))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &viewChild{t: t, cmd: cmd, lines: make(chan string, 100), stderr: &bytes.Buffer{}, done: make(chan error, 1), disp: disp}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	return c
}

func envWithout(name string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, name+"=") {
			env = append(env, e)
		}
	}
	return env
}

// waitFrame waits for the log line of a frame showing want (a prefix of
// what follows "frame N: ") and returns the rest of the line.
func (c *viewChild) waitFrame(want string, timeout time.Duration) string {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("vkattn view ended before a frame of %q; stderr:\n%s", want, c.stderr.String())
			}
			if _, rest, found := strings.Cut(line, ": "); found && strings.HasPrefix(rest, want) {
				return rest
			}
		case <-deadline:
			c.t.Fatalf("no frame of %q in %v; stderr:\n%s", want, timeout, c.stderr.String())
		}
	}
}

// xdo runs xdotool on the child's display.
func (c *viewChild) xdo(args ...string) string {
	c.t.Helper()
	cmd := exec.Command("xdotool", args...)
	cmd.Env = append(envWithout("DISPLAY"), "DISPLAY="+c.disp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("xdotool %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// window finds the viewer's window: its id and its geometry on the screen.
func (c *viewChild) window() (id string, r image.Rectangle) {
	c.t.Helper()
	id = strings.Fields(c.xdo("search", "--sync", "--name", "^vkattn view"))[0]
	vals := map[string]int{}
	for _, l := range strings.Split(c.xdo("getwindowgeometry", "--shell", id), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vals[k], _ = strconv.Atoi(v)
		}
	}
	return id, image.Rect(vals["X"], vals["Y"], vals["X"]+vals["WIDTH"], vals["Y"]+vals["HEIGHT"])
}

// screenshot is the whole screen, as `import -window root` takes it.
func (c *viewChild) screenshot() image.Image {
	c.t.Helper()
	cmd := exec.Command("import", "-window", "root", "png:-")
	cmd.Env = append(envWithout("DISPLAY"), "DISPLAY="+c.disp)
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("import -window root: %v", err)
	}
	return pngImage(c.t, "screenshot", bytes.NewReader(out))
}

// viewProblem is the problem the window shows, with what each view must
// look like according to the float64 reference.
type viewProblem struct {
	q, k, v         string
	B, H, L, S      int
	weights, vNorms []float64
	masked          func(b, i, j int) bool
}

func newViewProblem(t *testing.T, dir string) *viewProblem {
	const B, H, HKV, L, S, d, dv = 2, 2, 1, 4, 6, 4, 3
	rnd := normals(42, 7)
	qd, kd, vd := rnd(B*H*L*d, 1.5), rnd(B*HKV*S*d, 1.5), rnd(B*HKV*S*dv, 1)
	p := &viewProblem{B: B, H: H, L: L, S: S,
		q: writeArray(t, dir, "q.npy", []int{B, H, L, d}, qd),
		k: writeArray(t, dir, "k.npy", []int{B, HKV, S, d}, kd),
		v: writeArray(t, dir, "v.npy", []int{B, HKV, S, dv}, vd)}
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight, WantWeights: true}
	p.masked = func(_, i, j int) bool { return j > i+S-L }
	ref, err := reference.Attention(qd, [4]int{B, H, L, d}, kd, [4]int{B, HKV, S, d}, vd, [4]int{B, HKV, S, dv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	p.weights = ref.Weights
	for r := range B * HKV * S {
		var s float64
		for _, x := range vd[r*dv : (r+1)*dv] {
			s += float64(x) * float64(x)
		}
		p.vNorms = append(p.vNorms, math.Sqrt(s))
	}
	return p
}

// value is cell (i, j) of batch b, head h: a_ij, or a_ij*||v_j||.
func (p *viewProblem) value(b, h, i, j int, contribution bool) float64 {
	w := p.weights[((b*p.H+h)*p.L+i)*p.S+j]
	if contribution {
		w *= p.vNorms[b*p.S+j] // one value head
	}
	return w
}

// cellErrors compares the pixel at the centre of every cell of the window
// at r in img with the palette colour of its reference value (the scale
// top is the view's largest value; masked cells the colour of 0), and
// describes the mismatches.
func (p *viewProblem) cellErrors(img image.Image, r image.Rectangle, b, h int, contribution bool) []string {
	var top float64
	for i := range p.L {
		for j := range p.S {
			top = math.Max(top, p.value(b, h, i, j, contribution))
		}
	}
	pal := heatmap.Palette()
	var errs []string
	for i := range p.L {
		for j := range p.S {
			// The blit shows key floor((x+0.5)*S/W) at column x.
			x := r.Min.X + int((float64(j)+0.5)*float64(r.Dx())/float64(p.S))
			y := r.Min.Y + int((float64(i)+0.5)*float64(r.Dy())/float64(p.L))
			got := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			want := p.value(b, h, i, j, contribution)
			k := heatmap.Index(want, top)
			ok := false
			for _, e := range []int{k - 1, k, k + 1} {
				if p.masked(b, i, j) && e != 0 {
					continue
				}
				if e >= 0 && e < len(pal) && closeRGB(got, pal[e], 1) {
					ok = true
				}
			}
			if !ok {
				errs = append(errs, fmt.Sprintf("cell (%d,%d) value %.4f: pixel %v, want palette entry %d %v", i, j, want, got, k, pal[k]))
			}
		}
	}
	return errs
}

// expectCells takes screenshots until the window shows (b, h) as the
// reference says (presenting may lag the log line by a frame).
func (c *viewChild) expectCells(p *viewProblem, r image.Rectangle, b, h int, contribution bool) {
	c.t.Helper()
	var errs []string
	for try := 0; try < 20; try++ {
		if errs = p.cellErrors(c.screenshot(), r, b, h, contribution); len(errs) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Errorf("batch %d head %d (contribution %v): %d of %d cells wrong, first: %s",
		b, h, contribution, len(errs), p.L*p.S, errs[0])
}

// TestViewWindow: the window shows the device's weights in the palette
// colours of the reference's, the keys switch head, mode and batch item,
// the title names the cell under the mouse, resizing redraws at the new
// size, and q quits with status 0, no validation message and nothing left
// alive.
func TestViewWindow(t *testing.T) {
	needTools(t)
	withDevice(t)
	disp := startXvfb(t)
	p := newViewProblem(t, t.TempDir())
	start := time.Now()
	c := startView(t, disp, "-q", p.q, "-k", p.k, "-v", p.v, "--causal", "bottom-right", "--size", "300x200", "--log")
	c.waitFrame("batch 0 head 0 weights", 2*time.Minute)
	t.Logf("first frame after %v", time.Since(start).Round(time.Millisecond))
	id, r := c.window()
	if r.Dx() != 300 || r.Dy() != 200 {
		t.Fatalf("window %v, want 300x200", r)
	}
	c.expectCells(p, r, 0, 0, false)

	// The mouse over cell (2, 3): the title names it and its weight.
	c.xdo("mousemove", "--window", id, strconv.Itoa((3*300+150)/6), strconv.Itoa((2*200+100)/4))
	wantTitle := regexp.MustCompile(`batch 0/2 \| head 0/2 \| weights.* query 2, key 3: ([0-9.e+-]+)`)
	var title string
	for try := 0; try < 50; try++ {
		if title = c.xdo("getwindowname", id); wantTitle.MatchString(title) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := wantTitle.FindStringSubmatch(title)
	if m == nil {
		t.Fatalf("title %q does not name batch, head and the cell under the mouse", title)
	}
	if got, _ := strconv.ParseFloat(m[1], 64); !verdict.Near(got, p.value(0, 0, 2, 3, false), 1e-3) {
		t.Errorf("title says weight %s at query 2, key 3; reference %.4f", m[1], p.value(0, 0, 2, 3, false))
	}

	// Heads differ, so a key that changes the head changes the picture.
	if len(p.cellErrors(c.screenshot(), r, 0, 1, false)) == 0 {
		t.Fatal("heads 0 and 1 look alike: the test cannot tell them apart")
	}
	for _, k := range []struct {
		key, frame   string
		b, h         int
		contribution bool
	}{
		{"n", "batch 0 head 1 weights", 0, 1, false},
		{"c", "batch 0 head 1 contribution", 0, 1, true},
		{"b", "batch 1 head 1 contribution", 1, 1, true},
		{"p", "batch 1 head 0 contribution", 1, 0, true},
	} {
		c.xdo("key", k.key)
		c.waitFrame(k.frame, 20*time.Second)
		c.expectCells(p, r, k.b, k.h, k.contribution)
	}

	// A resize makes a new swapchain of the new size.
	c.xdo("windowsize", id, "420", "260")
	c.waitFrame("batch 1 head 0 contribution top", 20*time.Second)
	for try := 0; try < 50; try++ {
		if _, r = c.window(); r.Dx() == 420 && r.Dy() == 260 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.Dx() != 420 || r.Dy() != 260 {
		t.Fatalf("window %v after resizing to 420x260", r)
	}
	c.expectCells(p, r, 1, 0, true)

	c.xdo("key", "q")
	select {
	case err := <-c.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("q: %v; stderr:\n%s", err, c.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after q; stderr:\n%s", c.stderr.String())
	}
	if s := c.stderr.String(); s != "" {
		// validation messages, objects left alive and errors all go here
		t.Errorf("stderr not empty:\n%s", s)
	}
	t.Logf("whole session %v", time.Since(start).Round(time.Millisecond))
}

// TestViewWithoutDisplay: no DISPLAY, or one no server answers, fails at
// once with a message that says so, instead of GLFW's panic.
func TestViewWithoutDisplay(t *testing.T) {
	p := newViewProblem(t, t.TempDir())
	for _, disp := range []string{"", ":987"} {
		argv, _ := json.Marshal([]string{"view", "-q", p.q, "-k", p.k, "-v", p.v})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(envWithout("DISPLAY"), "VKATTN_TEST_CLI_ARGS="+string(argv))
		if disp != "" {
			cmd.Env = append(cmd.Env, "DISPLAY="+disp)
		}
		start := time.Now()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitFail {
			t.Fatalf("DISPLAY=%q: %v, want exit %d:\n%s", disp, err, exitFail, out)
		}
		want := "DISPLAY is not set"
		if disp != "" {
			want = `cannot open display ":987"`
		}
		if !strings.Contains(string(out), want) || strings.Contains(string(out), "panic") {
			t.Errorf("DISPLAY=%q: output lacks %q or panics:\n%s", disp, want, out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("DISPLAY=%q: failing took %v", disp, d)
		}
	}
}
