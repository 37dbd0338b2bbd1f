package vk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// liveObjects counts Vulkan objects created through this package and not yet
// destroyed, so tests can prove that Close frees everything.
var liveObjects atomic.Int64

func objectCreated()   { liveObjects.Add(1) }
func objectDestroyed() { liveObjects.Add(-1) }

// destroyOnce destroys the object *h with destroy unless it is gone (nil),
// then forgets and uncounts it: every destroy path frees a handle this way.
func destroyOnce[H comparable](h *H, destroy func(H)) {
	var none H
	if *h == none {
		return
	}
	destroy(*h)
	*h = none
	objectDestroyed()
}

// LiveObjects returns the number of Vulkan objects currently alive.
// Spares kept for reuse (see spares.go) are not counted.
func LiveObjects() int64 { return liveObjects.Load() - spareObjects.Load() }

// Device owns a logical device, its compute queue and a pipeline cache,
// plus everything created from it (buffers, kernels, command buffers):
// Close destroys them all.
//
// A Device and everything made on it are safe for concurrent use. Every
// operation that touches Vulkan enters the device (enter/exit) and Close
// waits until none is inside, so nothing is destroyed under a running
// call; after Close every operation fails with ErrClosed and every Close of
// an object is a no-op.
type Device struct {
	Info PhysicalDevice

	inst       *Instance
	handle     vulkan.Device
	borrowed   bool // the logical device is its owner's (Borrow): Close leaves it
	queueIndex uint32
	calls      *deviceCalls
	present    *presentCalls // presentation entry points, resolved on first use
	queue      vulkan.Queue
	cache      vulkan.PipelineCache
	cachePath  string
	memTypes   vulkan.PhysicalDeviceMemoryProperties
	// serial tells devices apart in messages (two opened on one GPU).
	serial int64

	// mu guards queue submission, the owner lists, the state of buffers
	// and commands, and the fields below.
	mu       sync.Mutex
	idle     sync.Cond // signalled when active drops to zero
	active   int       // operations inside the device
	closed   bool
	buffers  map[*Buffer]struct{}
	kernels  map[*Kernel]struct{}
	commands map[*Commands]struct{}
	inFlight map[*Commands]struct{} // submitted, not yet seen finished
	extras   map[extra]struct{}     // swapchains, images, semaphores
	allocLog allocations
	staging  stagingArea // for the transfers of unmapped buffers
	spare    spares      // objects Close gave back, for reuse
	discrete bool        // SetDiscreteMemory
	// lost: a call returned VK_ERROR_DEVICE_LOST (noteLost); atomic, as
	// calls made with mu held note it too.
	lost atomic.Bool
	// recordedForeign: commands were recorded into a host's command
	// buffer (Foreign), work Close must wait for as a whole.
	recordedForeign bool
	// extensions are those the device was created with (nil if borrowed).
	extensions []string
}

// ErrClosed is wrapped by every error of an operation on a closed device,
// or on a buffer or commands after their Close.
var ErrClosed = errors.New("vk: use after Close")

// deviceSerial numbers the devices opened in this process.
var deviceSerial atomic.Int64

// enter marks the start of an operation that uses the device's Vulkan
// handles; Close waits for every entered operation to exit. Entering never
// blocks on other operations, so nested enters are fine.
func (d *Device) enter() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%w: device %s", ErrClosed, d)
	}
	if d.lost.Load() {
		return fmt.Errorf("%w: device %s", ErrDeviceLost, d)
	}
	d.active++
	return nil
}

// exit ends an operation begun by enter.
func (d *Device) exit() {
	d.mu.Lock()
	d.active--
	if d.active == 0 {
		d.idle.Broadcast()
	}
	d.mu.Unlock()
}

// own adds o to an owner set (a device's kernels, a kernel's sets...)
// under the mutex that guards it; the owner's Close frees what is left.
func own[T comparable](mu *sync.Mutex, set map[T]struct{}, o T) {
	mu.Lock()
	set[o] = struct{}{}
	mu.Unlock()
}

// closeLocked is the body of an owned object's Close: free runs inside the
// device with d.mu held, and not at all after the device's Close (which
// freed everything).
func (d *Device) closeLocked(free func()) {
	if d.enter() != nil {
		return
	}
	defer d.exit()
	d.mu.Lock()
	defer d.mu.Unlock()
	free()
}

// Serial numbers the devices opened in this process, from 1.
func (d *Device) Serial() int64 { return d.serial }

// String names the device and tells it apart from others opened on the
// same physical device.
func (d *Device) String() string {
	return fmt.Sprintf("%s (device #%d, %s)", d.Info.Name, d.serial, d.Info.Type)
}

// allocations is the device's memory accounting.
type allocations struct {
	live, peak, largest uint64
	count, pools        int
	heapLive            []uint64 // bytes of memory allocated on each heap
	heapLimit           uint64   // SetHeapLimit's cap on each heap (0: none)
	commands            int
	submits, waits      int
	stagingBytes        uint64
}

// AllocStats is a snapshot of a device's allocations and of the work it
// handed the driver: the costs a discrete GPU feels per call (each
// submission and host wait is a round trip of tens of microseconds there;
// memory allocations are slow and their number is limited).
type AllocStats struct {
	Live     uint64 // bytes in live buffers
	Peak     uint64 // most bytes live at once
	Largest  uint64 // the largest single buffer ever allocated
	Count    int    // buffers allocated so far (each a vkAllocateMemory)
	Pools    int    // descriptor pools created so far
	Commands int    // command buffers created so far (each with its pool and fence)
	Submits  int    // queue submissions so far
	Waits    int    // host waits for a submission to finish so far
	// StagingBytes went between the host and device buffers through
	// host-visible staging buffers so far, both ways: the staging area of
	// unmapped buffers' Write and Read, and the staging buffers of calls
	// that carry their own transfers (a decode step).
	StagingBytes uint64
}

// AllocStats returns the device's allocation accounting.
func (d *Device) AllocStats() AllocStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.allocLog
	return AllocStats{Live: a.live, Peak: a.peak, Largest: a.largest, Count: a.count, Pools: a.pools,
		Commands: a.commands, Submits: a.submits, Waits: a.waits, StagingBytes: a.stagingBytes}
}

// SetHeapLimit caps the bytes d's buffers may take on each memory heap
// below the heap's reported size (0: the reported size), so a program can
// bound what it allocates, and tests can fill a heap.
func (d *Device) SetHeapLimit(bytes uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.allocLog.heapLimit = bytes
}

// ResetAllocStats restarts Peak and Largest from the live total, so a caller
// can measure what one operation allocates.
func (d *Device) ResetAllocStats() {
	d.mu.Lock()
	d.allocLog.peak = d.allocLog.live
	d.allocLog.largest = 0
	d.mu.Unlock()
}

// NewDevice creates a logical device on physical device index.
func (in *Instance) NewDevice(index int) (*Device, error) {
	return in.NewDeviceWith(index, DeviceConfig{})
}

// OpenDefault makes an instance with cfg and a device on its default
// physical device. On an error nothing is left open; otherwise the caller
// closes the device, then the instance.
func OpenDefault(cfg InstanceConfig) (*Instance, *Device, error) {
	inst, err := NewInstance(cfg)
	if err != nil {
		return nil, nil, err
	}
	idx, err := inst.DefaultDevice()
	if err == nil {
		var dev *Device
		if dev, err = inst.NewDevice(idx); err == nil {
			return inst, dev, nil
		}
	}
	inst.Close()
	return nil, nil, err
}

// DeviceConfig asks a device for more than compute.
type DeviceConfig struct {
	// Extensions are device extensions to enable (VK_KHR_swapchain for a
	// window); a missing one is an error naming it.
	Extensions []string
	// Present, if set, requires the device's queue to present to this
	// surface as well as compute, so a window is drawn from the same queue.
	Present *Surface
}

// NewDeviceWith creates a logical device on physical device index with
// what cfg asks for.
func (in *Instance) NewDeviceWith(index int, cfg DeviceConfig) (*Device, error) {
	if index < 0 || index >= len(in.devices) {
		return nil, fmt.Errorf("vk: device index %d out of range: %d device(s)", index, len(in.devices))
	}
	pd := in.devices[index]
	if len(cfg.Extensions) > 0 {
		have, err := deviceExtensions(in.handle, pd.handle)
		if err != nil {
			return nil, err
		}
		for _, e := range cfg.Extensions {
			if !slices.Contains(have, e) {
				return nil, fmt.Errorf("vk: device %s does not offer extension %s", pd.Name, e)
			}
		}
	}
	if cfg.Present != nil {
		family, timestamps, err := in.presentFamily(pd, cfg.Present)
		if err != nil {
			return nil, err
		}
		pd.queueFamily, pd.TimestampsOK = family, timestamps
	}
	// Memory budgets and subgroup size control are enabled wherever
	// offered: buffers prefer heaps with room, and the tiled kernels
	// require their subgroup size and full subgroups.
	exts, sizeControl := slices.Clone(cfg.Extensions), 0
	if pd.MemoryBudget && !slices.Contains(exts, extMemoryBudget) {
		exts = append(exts, extMemoryBudget)
	}
	if pd.SubgroupSizeControl {
		if !slices.Contains(exts, extSubgroupSizeControl) {
			exts = append(exts, extSubgroupSizeControl)
		}
		sizeControl = 1
		if pd.FullSubgroups {
			sizeControl = 2
		}
	}
	// A portability driver (MoltenVK) requires its subset enabled.
	exts = appendNew(exts, pd.portable...)
	// The cooperative-matrix kernels need the extension and its feature,
	// float16 arithmetic and the Vulkan memory model.
	coopmat := pd.CooperativeMatrices != nil
	if coopmat {
		for _, e := range coopmatExtensions {
			if !slices.Contains(exts, e) {
				exts = append(exts, e)
			}
		}
	}
	handle, calls, err := createDevice(in.handle, pd.handle, pd.queueFamily, exts, sizeControl, coopmat)
	if err != nil {
		if handle != nil {
			vulkan.DestroyDevice(handle, nil)
		}
		return nil, err
	}
	objectCreated()
	dev, err := newDevice(in, pd, handle, calls, 0, false)
	if dev != nil {
		dev.extensions = exts
	}
	return dev, err
}

// Extensions lists the device extensions the device was created with: the
// configured ones and those vkattn adds where the device offers them. A
// borrowed device's are its owner's and unknown: nil.
func (d *Device) Extensions() []string { return slices.Clone(d.extensions) }

// newDevice finishes a Device on logical device handle (made by vkattn,
// or borrowed from its owner): its queue, memory types and pipeline cache.
func newDevice(in *Instance, pd PhysicalDevice, handle vulkan.Device, calls *deviceCalls, queueIndex uint32, borrowed bool) (*Device, error) {
	d := &Device{
		Info:       pd,
		inst:       in,
		handle:     handle,
		borrowed:   borrowed,
		queueIndex: queueIndex,
		calls:      calls,
		present:    &presentCalls{},
		extras:     map[extra]struct{}{},
		serial:     deviceSerial.Add(1),
		buffers:    map[*Buffer]struct{}{},
		kernels:    map[*Kernel]struct{}{},
		commands:   map[*Commands]struct{}{},
		inFlight:   map[*Commands]struct{}{},
	}
	d.idle.L = &d.mu
	var queue vulkan.Queue
	vulkan.GetDeviceQueue(handle, pd.queueFamily, queueIndex, &queue)
	d.queue = queue
	vulkan.GetPhysicalDeviceMemoryProperties(pd.handle, &d.memTypes)
	d.memTypes.Deref()
	for i := range d.memTypes.MemoryTypes {
		d.memTypes.MemoryTypes[i].Deref()
	}
	for i := range d.memTypes.MemoryHeaps {
		d.memTypes.MemoryHeaps[i].Deref()
	}
	d.allocLog.heapLive = make([]uint64, len(d.memTypes.MemoryHeaps))
	d.memTypes.Free() // the values are in the Go fields now; vulkan-go's C copy is not freed otherwise

	if err := d.openPipelineCache(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openPipelineCache loads the on-disk pipeline cache for this exact device
// and driver (keyed by pipelineCacheUUID); a missing or unreadable file just
// means a cold cache.
// staleTemp is how old a half-written cache file must be to be another
// process's leftover (one killed while saving) rather than its save in
// progress.
const staleTemp = 10 * time.Minute

// removeStaleTemps removes the temporary files of saves of path that a
// process killed while saving left behind.
func removeStaleTemps(path string) {
	temps, _ := filepath.Glob(path + ".*.tmp")
	for _, t := range temps {
		if st, err := os.Stat(t); err == nil && time.Since(st.ModTime()) > staleTemp {
			os.Remove(t)
		}
	}
}

func (d *Device) openPipelineCache() error {
	if dir, err := os.UserCacheDir(); err == nil {
		d.cachePath = filepath.Join(dir, "vkattn", "pipelines-"+d.Info.CacheKey()+".bin")
	}
	var data []byte
	if d.cachePath != "" {
		data, _ = os.ReadFile(d.cachePath)
		removeStaleTemps(d.cachePath)
	}
	cdata := cBytes(data)
	defer cFree(cdata)
	var cache vulkan.PipelineCache
	info := vulkan.PipelineCacheCreateInfo{
		SType:           vulkan.StructureTypePipelineCacheCreateInfo,
		InitialDataSize: uint(len(data)),
		PInitialData:    cdata,
	}
	defer info.Free()
	err := d.call("vkCreatePipelineCache", func() vulkan.Result { return vulkan.CreatePipelineCache(d.handle, &info, nil, &cache) })
	if err != nil {
		return err
	}
	d.cache = cache
	objectCreated()
	return nil
}

// savePipelineCache writes the pipeline cache back; failures only cost
// compile time on the next run, so they are reported but not fatal to Close.
func (d *Device) savePipelineCache() error {
	if d.cachePath == "" || d.cache == nil {
		return nil
	}
	var size uint
	if err := d.call("vkGetPipelineCacheData", func() vulkan.Result { return vulkan.GetPipelineCacheData(d.handle, d.cache, &size, nil) }); err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	buf := make([]byte, size)
	if err := d.call("vkGetPipelineCacheData", func() vulkan.Result {
		return vulkan.GetPipelineCacheData(d.handle, d.cache, &size, unsafe.Pointer(&buf[0]))
	}); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(d.cachePath), 0o755); err != nil {
		return err
	}
	// A temporary file of its own, so processes closing devices at once
	// (parallel test packages) never rename each other's half-written data.
	f, err := os.CreateTemp(filepath.Dir(d.cachePath), filepath.Base(d.cachePath)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(buf[:size])
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), d.cachePath)
}

// WaitIdle blocks until the device has finished all submitted work.
func (d *Device) WaitIdle() error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	d.mu.Lock() // vkDeviceWaitIdle needs the queue externally synchronized
	defer d.mu.Unlock()
	err := d.call("vkDeviceWaitIdle", func() vulkan.Result { return vulkan.DeviceWaitIdle(d.handle) })
	if err == nil {
		for c := range d.inFlight {
			d.retireLocked(c)
		}
	}
	return err
}

// Close waits for the operations inside the device and for its work in
// flight, destroys every command buffer, buffer and kernel it still owns
// (whatever their owners' state), saves the pipeline cache and destroys the
// device. Safe to call twice and from any goroutine.
func (d *Device) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	for d.active > 0 {
		d.idle.Wait()
	}
	d.mu.Unlock()
	// Nothing can enter now: the owner lists are ours alone.
	var errs []error
	if d.borrowed && !d.recordedForeign {
		// The owner's queues are theirs to synchronise: wait for this
		// device's own submissions only. Once commands were recorded
		// into the owner's command buffers, their work is waited for
		// with the whole device's (vkDeviceWaitIdle below).
		for c := range d.inFlight {
			if err := d.call("vkWaitForFences", func() vulkan.Result {
				return vulkan.WaitForFences(d.handle, 1, []vulkan.Fence{c.fence}, vulkan.True, vulkan.MaxUint64)
			}); err != nil {
				errs = append(errs, err)
			}
		}
	} else if err := d.call("vkDeviceWaitIdle", func() vulkan.Result { return vulkan.DeviceWaitIdle(d.handle) }); err != nil {
		errs = append(errs, err)
	}
	d.mu.Lock()
	d.dropSparesLocked()
	d.mu.Unlock()
	for o := range d.extras {
		o.destroy()
	}
	for c := range d.commands {
		c.destroy()
	}
	for b := range d.buffers {
		b.destroy()
	}
	for k := range d.kernels {
		k.destroy()
	}
	d.commands, d.inFlight, d.buffers, d.kernels, d.extras = nil, nil, nil, nil, nil
	d.allocLog.live = 0
	clear(d.allocLog.heapLive)
	if err := d.savePipelineCache(); err != nil {
		errs = append(errs, fmt.Errorf("vk: saving pipeline cache: %w", err))
	}
	if d.cache != nil {
		vulkan.DestroyPipelineCache(d.handle, d.cache, nil)
		objectDestroyed()
	}
	if !d.borrowed {
		vulkan.DestroyDevice(d.handle, nil)
		objectDestroyed()
	}
	return errors.Join(errs...)
}

// findMemoryType is the first memory type allowed by bits with every flag
// of want and none of avoid.
func (d *Device) findMemoryType(bits uint32, want, avoid vulkan.MemoryPropertyFlagBits) (uint32, bool) {
	for i := uint32(0); i < d.memTypes.MemoryTypeCount; i++ {
		f := vulkan.MemoryPropertyFlagBits(d.memTypes.MemoryTypes[i].PropertyFlags)
		if bits&(1<<i) != 0 && f&want == want && f&avoid == 0 {
			return i, true
		}
	}
	return 0, false
}
