package vulkanhost_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/nn"
	"github.com/vkattn/vkattn/reference"
)

// hostBuffer is a VkBuffer the host made, in host-visible coherent memory
// it keeps mapped.
type hostBuffer struct {
	buf    vulkan.Buffer
	mem    vulkan.DeviceMemory
	size   uint64
	usage  vulkan.BufferUsageFlags
	mapped unsafe.Pointer
}

// newBuffer makes a host buffer of size bytes with usage; Cleanup
// destroys it (after the vkattn devices a test closes first).
func (h *host) newBuffer(t *testing.T, size uint64, usage vulkan.BufferUsageFlags) *hostBuffer {
	t.Helper()
	b := &hostBuffer{size: size, usage: usage}
	info := vulkan.BufferCreateInfo{SType: vulkan.StructureTypeBufferCreateInfo, Size: vulkan.DeviceSize(size),
		Usage: usage, SharingMode: vulkan.SharingModeExclusive}
	defer info.Free()
	var buf vulkan.Buffer
	if err := vulkan.Error(vulkan.CreateBuffer(h.dev, &info, nil, &buf)); err != nil {
		t.Fatal("vkCreateBuffer:", err)
	}
	b.buf = buf
	var req vulkan.MemoryRequirements
	vulkan.GetBufferMemoryRequirements(h.dev, buf, &req)
	req.Deref()
	var props vulkan.PhysicalDeviceMemoryProperties
	vulkan.GetPhysicalDeviceMemoryProperties(h.pd, &props)
	props.Deref()
	want := vulkan.MemoryPropertyFlags(vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit)
	index := -1
	for i := uint32(0); i < props.MemoryTypeCount; i++ {
		props.MemoryTypes[i].Deref()
		if req.MemoryTypeBits&(1<<i) != 0 && props.MemoryTypes[i].PropertyFlags&want == want {
			index = int(i)
			break
		}
	}
	if index < 0 {
		vulkan.DestroyBuffer(h.dev, buf, nil)
		t.Fatal("no host-visible coherent memory type")
	}
	alloc := vulkan.MemoryAllocateInfo{SType: vulkan.StructureTypeMemoryAllocateInfo, AllocationSize: req.Size, MemoryTypeIndex: uint32(index)}
	defer alloc.Free()
	var mem vulkan.DeviceMemory
	if err := vulkan.Error(vulkan.AllocateMemory(h.dev, &alloc, nil, &mem)); err != nil {
		vulkan.DestroyBuffer(h.dev, buf, nil)
		t.Fatal("vkAllocateMemory:", err)
	}
	b.mem = mem
	if err := vulkan.Error(vulkan.BindBufferMemory(h.dev, buf, mem, 0)); err != nil {
		t.Fatal("vkBindBufferMemory:", err)
	}
	var p unsafe.Pointer
	if err := vulkan.Error(vulkan.MapMemory(h.dev, mem, 0, vulkan.DeviceSize(size), 0, &p)); err != nil {
		t.Fatal("vkMapMemory:", err)
	}
	b.mapped = p
	t.Cleanup(func() { b.destroy(h) })
	return b
}

// destroy frees the buffer and its memory (the host's own calls).
func (b *hostBuffer) destroy(h *host) {
	if b.buf == nil {
		return
	}
	vulkan.UnmapMemory(h.dev, b.mem)
	vulkan.DestroyBuffer(h.dev, b.buf, nil)
	vulkan.FreeMemory(h.dev, b.mem, nil)
	b.buf, b.mem = nil, nil
}

// floats is the buffer's memory as float32s from byte offset off.
func (b *hostBuffer) floats(off uint64, n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Add(b.mapped, off)), n)
}

// region is n floats of b from byte offset off shaped shape.
func (b *hostBuffer) region(off uint64, shape []int, bound float64) vkattn.BufferRegion {
	return vkattn.BufferRegion{Buffer: b.buf, Size: b.size, Usage: b.usage, Offset: off, Shape: shape, Type: vkattn.Float32, Bound: bound}
}

// commands is a command pool, one command buffer and a fence of the
// host's.
type commands struct {
	h     *host
	pool  vulkan.CommandPool
	cmd   vulkan.CommandBuffer
	fence vulkan.Fence
	queue vulkan.Queue
}

func (h *host) newCommands(t *testing.T) *commands {
	t.Helper()
	c := &commands{h: h}
	poolInfo := vulkan.CommandPoolCreateInfo{SType: vulkan.StructureTypeCommandPoolCreateInfo,
		Flags: vulkan.CommandPoolCreateFlags(vulkan.CommandPoolCreateResetCommandBufferBit), QueueFamilyIndex: h.family}
	defer poolInfo.Free()
	var pool vulkan.CommandPool
	if err := vulkan.Error(vulkan.CreateCommandPool(h.dev, &poolInfo, nil, &pool)); err != nil {
		t.Fatal("vkCreateCommandPool:", err)
	}
	c.pool = pool
	t.Cleanup(func() {
		vulkan.DeviceWaitIdle(h.dev)
		if c.fence != nil {
			vulkan.DestroyFence(h.dev, c.fence, nil)
		}
		vulkan.DestroyCommandPool(h.dev, c.pool, nil)
	})
	alloc := vulkan.CommandBufferAllocateInfo{SType: vulkan.StructureTypeCommandBufferAllocateInfo, CommandPool: pool,
		Level: vulkan.CommandBufferLevelPrimary, CommandBufferCount: 1}
	defer alloc.Free()
	cmds := make([]vulkan.CommandBuffer, 1)
	if err := vulkan.Error(vulkan.AllocateCommandBuffers(h.dev, &alloc, cmds)); err != nil {
		t.Fatal("vkAllocateCommandBuffers:", err)
	}
	c.cmd = cmds[0]
	fenceInfo := vulkan.FenceCreateInfo{SType: vulkan.StructureTypeFenceCreateInfo}
	defer fenceInfo.Free()
	var fence vulkan.Fence
	if err := vulkan.Error(vulkan.CreateFence(h.dev, &fenceInfo, nil, &fence)); err != nil {
		t.Fatal("vkCreateFence:", err)
	}
	c.fence = fence
	var q vulkan.Queue
	vulkan.GetDeviceQueue(h.dev, h.family, 0, &q)
	c.queue = q
	return c
}

// begin starts a recording; the result is what vkattn records into.
func (c *commands) begin(t *testing.T) vkattn.CommandBuffer {
	t.Helper()
	if err := vulkan.Error(vulkan.ResetCommandBuffer(c.cmd, 0)); err != nil {
		t.Fatal("vkResetCommandBuffer:", err)
	}
	info := vulkan.CommandBufferBeginInfo{SType: vulkan.StructureTypeCommandBufferBeginInfo}
	defer info.Free()
	if err := vulkan.Error(vulkan.BeginCommandBuffer(c.cmd, &info)); err != nil {
		t.Fatal("vkBeginCommandBuffer:", err)
	}
	return vkattn.CommandBuffer{Device: c.h.dev, Buffer: c.cmd}
}

// submit ends the recording, submits it and waits on the fence: the one
// submission and wait of the host's.
func (c *commands) submit(t *testing.T) {
	t.Helper()
	if err := vulkan.Error(vulkan.EndCommandBuffer(c.cmd)); err != nil {
		t.Fatal("vkEndCommandBuffer:", err)
	}
	if err := vulkan.Error(vulkan.ResetFences(c.h.dev, 1, []vulkan.Fence{c.fence})); err != nil {
		t.Fatal("vkResetFences:", err)
	}
	submit := []vulkan.SubmitInfo{{SType: vulkan.StructureTypeSubmitInfo, CommandBufferCount: 1, PCommandBuffers: []vulkan.CommandBuffer{c.cmd}}}
	if err := vulkan.Error(vulkan.QueueSubmit(c.queue, 1, submit, c.fence)); err != nil {
		t.Fatal("vkQueueSubmit:", err)
	}
	if err := vulkan.Error(vulkan.WaitForFences(c.h.dev, 1, []vulkan.Fence{c.fence}, vulkan.True, vulkan.MaxUint64)); err != nil {
		t.Fatal("vkWaitForFences:", err)
	}
}

// inFreshProcess runs the calling test alone in a child process with the
// validation layer's own output (VKATTN_VALIDATION=1 in the suite), and
// fails on any validation error there. It reports whether this is the
// child, which runs the test's body.
func inFreshProcess(t *testing.T) bool {
	if os.Getenv("VKATTN_SUBPROCESS") == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "VKATTN_SUBPROCESS="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("%s in a fresh process: %v\n%s", t.Name(), err, out)
	}
	if bytes.Contains(out, []byte("Validation Error")) {
		t.Fatalf("Vulkan validation errors in the fresh process:\n%s", out)
	}
	return false
}

// TestTensorsOverHostBuffersRecorded: a host's Q, K and V, written into its
// own buffers, are read in place by a prepared call recorded into the
// host's command buffer, and a KV-cache decode step recorded the same way
// appends the host's K and V and writes O into the host's buffer; both
// agree with the float64 reference. vkattn frees none of the host's
// buffers: the host destroys them after vkattn's Close, with the
// validation layer on and silent.
func TestTensorsOverHostBuffersRecorded(t *testing.T) {
	if !inFreshProcess(t) {
		return
	}
	h := newHost(t)
	cmds := h.newCommands(t)
	const B, H, HKV, L, S, dk, dv = 1, 4, 2, 3, 9, 8, 8
	in, shapes := random.QKV(rand.New(rand.NewPCG(47, 1)), random.Normal, B, H, HKV, L, S, dk, dv)
	// One buffer holds Q, K and V one after another, each from a
	// multiple of 16 bytes.
	offsets := [3]uint64{0, 512, 1280}
	buf := h.newBuffer(t, 2048, vkattn.HostBufferUsage)
	d, err := vkattn.OpenOn(h.shared(), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ts [3]*vkattn.Tensor
	for i := range ts {
		copy(buf.floats(offsets[i], len(in[i])), in[i])
		if ts[i], err = d.TensorOver(buf.region(offsets[i], shapes[i][:], 8)); err != nil {
			t.Fatal(err)
		}
	}
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight}
	call, err := d.Prepare(ts[0], ts[1], ts[2], opts)
	if err != nil {
		t.Fatal(err)
	}
	before := d.Stats()
	if err := call.Record(cmds.begin(t)); err != nil {
		t.Fatal(err)
	}
	cmds.submit(t)
	if s := d.Stats().Since(before); s.Submits != 0 || s.Waits != 0 || s.Allocations != 0 {
		t.Errorf("recording: vkattn made %d submissions, %d waits and %d allocations of its own, want none", s.Submits, s.Waits, s.Allocations)
	}
	got, err := call.Output().O.Download()
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference.Attention(in[0], shapes[0], in[1], shapes[1], in[2], shapes[2], opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := verdict.Compare(got, want.O, verdict.SweepTolerance); !c.OK() {
		t.Fatalf("recorded call over host buffers: worst [%d] %.3g times the bound", c.Worst, c.Ratio)
	}
	// The tensors read the host's memory as it is when the submission
	// runs: a host write between recordings is seen by the next.
	for i := range in[0] {
		in[0][i] = -in[0][i]
	}
	copy(buf.floats(offsets[0], len(in[0])), in[0])
	if err := call.Record(cmds.begin(t)); err != nil {
		t.Fatal(err)
	}
	cmds.submit(t)
	if got, err = call.Output().O.Download(); err != nil {
		t.Fatal(err)
	}
	if want, err = reference.Attention(in[0], shapes[0], in[1], shapes[1], in[2], shapes[2], opts); err != nil {
		t.Fatal(err)
	}
	if c := verdict.Compare(got, want.O, verdict.SweepTolerance); !c.OK() {
		t.Fatalf("recorded call after the host rewrote Q: worst [%d] %.3g times the bound", c.Worst, c.Ratio)
	}
	call.Close()
	for _, x := range ts {
		x.Close()
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := vkattn.LiveObjects(); n != 0 {
		t.Errorf("%d Vulkan objects alive after Close", n)
	}
	// The buffer is still the host's: it writes and reads it, then
	// destroys it (Cleanup) with the validation layer watching.
	buf.floats(0, 1)[0] = 1
}

// TestTensorOverRefusals: each region vkattn cannot read as a tensor is
// refused with the sentinel that names why, and so is a device of
// vkattn's own.
func TestTensorOverRefusals(t *testing.T) {
	h := newHost(t)
	buf := h.newBuffer(t, 1024, vkattn.HostBufferUsage)
	d, err := vkattn.OpenOn(h.shared(), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	good := buf.region(0, []int{2, 8}, 1)
	with := func(f func(r *vkattn.BufferRegion)) vkattn.BufferRegion {
		r := good
		f(&r)
		return r
	}
	for _, c := range []struct {
		name   string
		region vkattn.BufferRegion
		want   error
	}{
		{"past the buffer", with(func(r *vkattn.BufferRegion) { r.Shape = []int{17, 16} }), vkattn.ErrShape},
		{"offset pushes it past the end", with(func(r *vkattn.BufferRegion) { r.Offset = 1024 - 32 }), vkattn.ErrShape},
		{"offset past the buffer", with(func(r *vkattn.BufferRegion) { r.Offset = 4096 }), vkattn.ErrShape},
		{"misaligned offset", with(func(r *vkattn.BufferRegion) { r.Offset = 2 }), vkattn.ErrShape},
		{"half-misaligned float16", with(func(r *vkattn.BufferRegion) { r.Offset, r.Type = 1, vkattn.Float16 }), vkattn.ErrShape},
		{"no texel usage", with(func(r *vkattn.BufferRegion) {
			r.Usage &^= vulkan.BufferUsageFlags(vulkan.BufferUsageUniformTexelBufferBit)
		}), vkattn.ErrOption},
		{"no transfer usage", with(func(r *vkattn.BufferRegion) {
			r.Usage = vulkan.BufferUsageFlags(vulkan.BufferUsageStorageBufferBit)
		}), vkattn.ErrOption},
		{"q8_0", with(func(r *vkattn.BufferRegion) { r.Type, r.Shape = vkattn.Q8_0, []int{1, 32} }), vkattn.ErrOption},
		{"infinite bound", with(func(r *vkattn.BufferRegion) { r.Bound = float64(1) / float64(zero()) }), vkattn.ErrOption},
		{"negative bound", with(func(r *vkattn.BufferRegion) { r.Bound = -1 }), vkattn.ErrOption},
		{"empty axis", with(func(r *vkattn.BufferRegion) { r.Shape = []int{0, 8} }), vkattn.ErrEmpty},
		{"rank 5", with(func(r *vkattn.BufferRegion) { r.Shape = []int{1, 1, 1, 2, 8} }), vkattn.ErrShape},
		{"no buffer", with(func(r *vkattn.BufferRegion) { r.Buffer = nil }), vkattn.ErrShape},
		{"no size", with(func(r *vkattn.BufferRegion) { r.Size = 0 }), vkattn.ErrShape},
	} {
		tn, err := d.TensorOver(c.region)
		if err == nil {
			tn.Close()
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
	tn, err := d.TensorOver(good)
	if err != nil {
		t.Fatalf("a good region: %v", err)
	}
	tn.Close()

	own, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if _, err := own.TensorOver(good); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("a region on a device of vkattn's own: error %v, want ErrOption", err)
	}
}

func zero() int { return 0 }

// smallCall prepares a call of a (1, 1, 2, 4) Q, K and V on d.
func smallCall(t *testing.T, d *vkattn.Device) *vkattn.Call {
	t.Helper()
	q, err := d.Upload([]int{1, 1, 2, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	call, err := d.Prepare(q, q, q, vkattn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return call
}

// TestRecordRefusals: a recording into a command buffer of another device
// than the one shared, on a device of vkattn's own, without a command
// buffer, or of a closed call is refused, and the call still records and
// runs right afterwards.
func TestRecordRefusals(t *testing.T) {
	h := newHost(t)
	cmds := h.newCommands(t)
	d, err := vkattn.OpenOn(h.shared(), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	call := smallCall(t, d)
	cmd := cmds.begin(t)
	other := newHost(t)
	for _, c := range []struct {
		name string
		cmd  vkattn.CommandBuffer
		want error
	}{
		{"another device's", vkattn.CommandBuffer{Device: other.dev, Buffer: cmd.Buffer}, vkattn.ErrDevice},
		{"no command buffer", vkattn.CommandBuffer{Device: cmd.Device}, vkattn.ErrOption},
		{"no device", vkattn.CommandBuffer{Buffer: cmd.Buffer}, vkattn.ErrDevice},
	} {
		if err := call.Record(c.cmd); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
	if err := call.Record(cmd); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	cmds.submit(t)
	if _, err := call.Output().O.Download(); err != nil {
		t.Fatal(err)
	}
	call.Close()
	if err := call.Record(cmds.begin(t)); !errors.Is(err, vkattn.ErrClosed) {
		t.Errorf("after the call's Close: error %v, want ErrClosed", err)
	}
	cmds.submit(t) // an empty recording, ended and run

	own, err := vkattn.Open(vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ocall := smallCall(t, own)
	defer ocall.Close()
	if err := ocall.Record(cmd); !errors.Is(err, vkattn.ErrOption) {
		t.Errorf("a call on a device of vkattn's own: error %v, want ErrOption", err)
	}
	if _, err := ocall.Run(context.Background()); err != nil {
		t.Errorf("the own device's call after the refusal: %v", err)
	}
}

// TestLayerCallRecorded: an MHA layer's prepared call recorded into the
// host's command buffer writes what its Run writes, bit for bit (the
// layer's own results are checked against PyTorch in package nn), with no
// submission of vkattn's own.
func TestLayerCallRecorded(t *testing.T) {
	h := newHost(t)
	cmds := h.newCommands(t)
	d, err := vkattn.OpenOn(h.shared(), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const B, T, dm = 2, 3, 8
	r := rand.New(rand.NewPCG(5, 9))
	values := func(n int) []float32 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(r.NormFloat64())
		}
		return xs
	}
	m, err := nn.NewMHA(d, &nn.MHAWeights{DModel: dm, KDim: dm, VDim: dm, InProjWeight: values(3 * dm * dm),
		InProjBias: values(3 * dm), OutProjWeight: values(dm * dm), OutProjBias: values(dm)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, err := d.Upload([]int{B, T, dm}, values(B*T*dm))
	if err != nil {
		t.Fatal(err)
	}
	call, err := m.Prepare(x, nil, nil, nn.MHAOptions{Heads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer call.Close()
	if _, err := call.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ran, err := call.Output().Out.Download()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Write(values(B * T * dm)); err != nil { // then back: the recording must compute anew
		t.Fatal(err)
	}
	if _, err := call.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = rand.New(rand.NewPCG(5, 9))
	for range 3*dm*dm + 3*dm + dm*dm + dm { // the weights' draws, to draw x again
		r.NormFloat64()
	}
	if err := x.Write(values(B * T * dm)); err != nil {
		t.Fatal(err)
	}
	before := d.Stats()
	if err := call.Record(cmds.begin(t)); err != nil {
		t.Fatal(err)
	}
	cmds.submit(t)
	if s := d.Stats().Since(before); s.Submits != 0 || s.Waits != 0 {
		t.Errorf("recording: %d submissions and %d waits of vkattn's own, want none", s.Submits, s.Waits)
	}
	recorded, err := call.Output().Out.Download()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ran {
		if ran[i] != recorded[i] {
			t.Fatalf("out[%d]: recorded %g, run %g", i, recorded[i], ran[i])
		}
	}
}
