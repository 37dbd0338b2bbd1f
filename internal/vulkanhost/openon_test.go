// Package vulkanhost_test runs vkattn on a device that a host program made
// with vulkan-go alone (vkattn.OpenOn). It is a package of its own so that
// a child process of its test binary starts with nothing of vkattn run
// (the root package's TestMain opens devices before any test).
package vulkanhost_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verdict"
	"github.com/vkattn/vkattn/reference"
)

// host is what a vulkan-go program made: an instance and a device with
// one queue of a compute family.
type host struct {
	inst   vulkan.Instance
	pd     vulkan.PhysicalDevice
	dev    vulkan.Device
	family uint32
	// familyQueues is how many queues the family offers; families how
	// many families the physical device has.
	familyQueues, families uint32
}

// newHost makes the instance and device as a host program does, through
// vulkan-go's own loader and entry points (with the validation layer
// under VKATTN_VALIDATION=1: with no callback it prints what it finds,
// which the parent process looks for). Cleanup destroys them, after the
// vkattn devices a test registers later have closed.
func newHost(t *testing.T) *host {
	t.Helper()
	if err := vulkan.SetDefaultGetInstanceProcAddr(); err != nil {
		t.Fatal(err)
	}
	if err := vulkan.Init(); err != nil {
		t.Fatal(err)
	}
	info := &vulkan.InstanceCreateInfo{
		SType: vulkan.StructureTypeInstanceCreateInfo,
		PApplicationInfo: &vulkan.ApplicationInfo{SType: vulkan.StructureTypeApplicationInfo,
			PApplicationName: "vulkanhost\x00", ApiVersion: vulkan.MakeVersion(1, 1, 0)},
	}
	if os.Getenv("VKATTN_VALIDATION") == "1" {
		info.EnabledLayerCount, info.PpEnabledLayerNames = 1, []string{"VK_LAYER_KHRONOS_validation\x00"}
	}
	var inst vulkan.Instance
	if err := vulkan.Error(vulkan.CreateInstance(info, nil, &inst)); err != nil {
		t.Fatal("vkCreateInstance:", err)
	}
	if err := vulkan.InitInstance(inst); err != nil {
		vulkan.DestroyInstance(inst, nil)
		t.Fatal(err)
	}
	h := &host{inst: inst}
	t.Cleanup(func() {
		if h.dev != nil {
			vulkan.DeviceWaitIdle(h.dev)
			vulkan.DestroyDevice(h.dev, nil)
		}
		vulkan.DestroyInstance(h.inst, nil)
	})
	var n uint32
	if err := vulkan.Error(vulkan.EnumeratePhysicalDevices(inst, &n, nil)); err != nil || n == 0 {
		t.Fatalf("vkEnumeratePhysicalDevices: %d devices, %v", n, err)
	}
	pds := make([]vulkan.PhysicalDevice, n)
	if err := vulkan.Error(vulkan.EnumeratePhysicalDevices(inst, &n, pds)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, pd := range pds[:n] {
		var nf uint32
		vulkan.GetPhysicalDeviceQueueFamilyProperties(pd, &nf, nil)
		props := make([]vulkan.QueueFamilyProperties, nf)
		vulkan.GetPhysicalDeviceQueueFamilyProperties(pd, &nf, props)
		for i := range props[:nf] {
			props[i].Deref()
			if vulkan.QueueFlagBits(props[i].QueueFlags)&vulkan.QueueComputeBit != 0 {
				h.pd, h.family, h.familyQueues, h.families, found = pd, uint32(i), props[i].QueueCount, nf, true
				break
			}
		}
		if found {
			break
		}
	}
	if !found {
		t.Fatal("no physical device with a compute queue")
	}
	queue := vulkan.DeviceQueueCreateInfo{SType: vulkan.StructureTypeDeviceQueueCreateInfo,
		QueueFamilyIndex: h.family, QueueCount: 1, PQueuePriorities: []float32{1}}
	var dev vulkan.Device
	if err := vulkan.Error(vulkan.CreateDevice(h.pd, &vulkan.DeviceCreateInfo{SType: vulkan.StructureTypeDeviceCreateInfo,
		QueueCreateInfoCount: 1, PQueueCreateInfos: []vulkan.DeviceQueueCreateInfo{queue}}, nil, &dev)); err != nil {
		t.Fatal("vkCreateDevice:", err)
	}
	h.dev = dev
	return h
}

// shared is the host's device with its one queue, as OpenOn takes it.
func (h *host) shared() vkattn.SharedDevice {
	return vkattn.SharedDevice{Instance: h.inst, PhysicalDevice: h.pd, Device: h.dev, QueueFamily: h.family}
}

// TestOpenOnAsTheFirstCall: in a process where nothing of vkattn ran
// before, a host makes its instance and device with vulkan-go and opens
// vkattn on them; vkattn computes a small attention right (against the
// float64 reference), closes with nothing left alive, and the host's own
// vulkan-go calls still work after it.
func TestOpenOnAsTheFirstCall(t *testing.T) {
	if !inFreshProcess(t) {
		return
	}
	h := newHost(t)
	d, err := vkattn.OpenOn(h.shared(), vkattn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close()
		}
	})

	const B, H, L, S, dk, dv = 1, 2, 5, 7, 8, 4
	in, shapes := random.QKV(rand.New(rand.NewPCG(34, 6)), random.Normal, B, H, H, L, S, dk, dv)
	var ts [3]*vkattn.Tensor
	for i, s := range shapes {
		if ts[i], err = d.Upload(s[:], in[i]); err != nil {
			t.Fatal(err)
		}
	}
	opts := vkattn.Options{Causal: vkattn.CausalBottomRight}
	out, err := d.Attention(ts[0], ts[1], ts[2], opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := out.O.Download()
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference.Attention(in[0], shapes[0], in[1], shapes[1], in[2], shapes[2], opts)
	if err != nil {
		t.Fatal(err)
	}
	if c := verdict.Compare(got, want.O, verdict.SweepTolerance); !c.OK() {
		t.Fatalf("O on the host's device: %d values (want %d), worst [%d] %.3g times the bound %g", c.Got, c.Want, c.Worst, c.Ratio, verdict.SweepTolerance)
	}
	closed = true
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := vkattn.LiveObjects(); n != 0 {
		t.Errorf("%d Vulkan objects alive after Close", n)
	}
	// The host goes on with its own instance-level calls.
	var props vulkan.PhysicalDeviceProperties
	vulkan.GetPhysicalDeviceProperties(h.pd, &props)
	props.Deref()
	if name := vulkan.ToString(props.DeviceName[:]); name == "" {
		t.Error("the host's vkGetPhysicalDeviceProperties after vkattn: no device name")
	}
}

// TestOpenOnRefusals: every refusal of OpenOn wraps ErrOption, among them
// a queue index the host's one-queue device does not have (which
// vkGetDeviceQueue would answer with an undefined handle); the host's
// device is then still usable by vkattn.
func TestOpenOnRefusals(t *testing.T) {
	h := newHost(t)
	with := func(f func(s *vkattn.SharedDevice)) vkattn.SharedDevice {
		s := h.shared()
		f(&s)
		return s
	}
	for _, c := range []struct {
		name string
		dev  vkattn.SharedDevice
	}{
		{"nil instance", with(func(s *vkattn.SharedDevice) { s.Instance = nil })},
		{"nil physical device", with(func(s *vkattn.SharedDevice) { s.PhysicalDevice = nil })},
		{"nil device", with(func(s *vkattn.SharedDevice) { s.Device = nil })},
		{"all nil", vkattn.SharedDevice{}},
		{"queue family 99", with(func(s *vkattn.SharedDevice) { s.QueueFamily = 99 })},
		{"queue family past the last", with(func(s *vkattn.SharedDevice) { s.QueueFamily = h.families })},
		{"queue index 5 of one queue", with(func(s *vkattn.SharedDevice) { s.QueueIndex = 5 })},
		{"queue index 1 of one queue", with(func(s *vkattn.SharedDevice) { s.QueueIndex = 1 })},
		{"queue index 1 of QueueCount 1", with(func(s *vkattn.SharedDevice) { s.QueueIndex, s.QueueCount = 1, 1 })},
		{"queue count past the family's", with(func(s *vkattn.SharedDevice) { s.QueueCount = h.familyQueues + 1 })},
	} {
		d, err := vkattn.OpenOn(c.dev, vkattn.Config{})
		if err == nil {
			d.Close()
		}
		if !errors.Is(err, vkattn.ErrOption) {
			t.Errorf("%s: error %v, want ErrOption", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
		for _, other := range []error{vkattn.ErrDevice, vkattn.ErrNoDriver} {
			if errors.Is(err, other) {
				t.Errorf("%s: error %v wraps %v besides ErrOption", c.name, err, other)
			}
		}
	}
	for _, count := range []uint32{0, 1} {
		d, err := vkattn.OpenOn(with(func(s *vkattn.SharedDevice) { s.QueueCount = count }), vkattn.Config{})
		if err != nil {
			t.Fatalf("QueueIndex 0, QueueCount %d: %v", count, err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
