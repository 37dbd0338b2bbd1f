package vk

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"

	vulkan "github.com/vulkan-go/vulkan"
)

// The memory types a buffer tries, on the memory of a discrete GPU: a
// small BAR window (device-local and mappable), plain device memory, and
// system memory the host maps.
func TestMemoryTypeOrder(t *testing.T) {
	const (
		dl = vulkan.MemoryPropertyDeviceLocalBit
		hv = vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit
	)
	d := &Device{Info: PhysicalDevice{DeviceInfo: core.DeviceInfo{Type: core.DeviceDiscrete}}}
	for i, f := range []vulkan.MemoryPropertyFlagBits{dl | hv, dl, hv} {
		d.memTypes.MemoryTypes[i].PropertyFlags = vulkan.MemoryPropertyFlags(f)
	}
	d.memTypes.MemoryTypeCount = 3
	const small, large = 256, 1 << 20
	if got := d.memoryTypesFor(0b111, small, deviceData); !slices.Equal(got, []uint32{0, 1}) {
		t.Errorf("small device buffers try types %v, want the BAR window then device memory [0 1]", got)
	}
	if got := d.memoryTypesFor(0b111, large, deviceData); !slices.Equal(got, []uint32{1, 0}) {
		t.Errorf("large device buffers try types %v, want device memory then the BAR window [1 0]", got)
	}
	if got := d.memoryTypesFor(0b111, large, stagingData); !slices.Equal(got, []uint32{2}) {
		t.Errorf("staging buffers try types %v, want system memory [2], not the BAR window", got)
	}
	if got := d.memoryTypesFor(0b010, small, deviceData); !slices.Equal(got, []uint32{1}) {
		t.Errorf("a buffer allowed only type 1 tries %v", got)
	}
	// An integrated GPU's memory is the host's: mappable first at any size.
	d.Info.Type = core.DeviceIntegrated
	if got := d.memoryTypesFor(0b111, large, deviceData); !slices.Equal(got, []uint32{0, 1}) {
		t.Errorf("integrated: large device buffers try types %v, want mappable memory first [0 1]", got)
	}
	// lavapipe's one type: device-local, mappable, coherent.
	one := &Device{}
	one.memTypes.MemoryTypes[0].PropertyFlags = vulkan.MemoryPropertyFlags(dl | hv)
	one.memTypes.MemoryTypeCount = 1
	if got, stage := one.memoryTypesFor(1, large, deviceData), one.memoryTypesFor(1, large, stagingData); !slices.Equal(got, []uint32{0}) || !slices.Equal(stage, []uint32{0}) {
		t.Errorf("one memory type: buffers try %v, staging %v; want [0] for both", got, stage)
	}
}

// A full heap is vkAllocateMemory's error, naming the call, and leaves no
// object behind; a buffer allocated after it works.
func TestBufferOnAFullHeap(t *testing.T) {
	inst, d, opened := openTestDevice(t)
	defer closeTestDevice(t, inst, d, opened)
	before := LiveObjects()
	real := allocateMemory
	allocateMemory = func(vulkan.Device, *vulkan.MemoryAllocateInfo, *vulkan.DeviceMemory) vulkan.Result {
		return vulkan.ErrorOutOfDeviceMemory
	}
	_, err := d.NewBuffer(1024)
	allocateMemory = real
	var e *Error
	if !errors.As(err, &e) || e.Call != "vkAllocateMemory" || !outOfMemory(err) {
		t.Fatalf("NewBuffer on a full heap: %v, want vkAllocateMemory's out-of-memory error", err)
	}
	if n := LiveObjects(); n != before {
		t.Errorf("%d objects alive after the failed allocation, %d before", n, before)
	}
	b, err := d.NewBuffer(1024)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// Unmapped buffers (what a discrete GPU's large buffers are) are written
// and read through the device's one staging area: round trips are exact,
// a transfer larger than the area goes through in pieces, goroutines take
// turns on it, and once it exists transfers allocate nothing.
func TestTransfersThroughTheStagingArea(t *testing.T) {
	inst, d, opened := openTestDevice(t)
	defer closeTestDevice(t, inst, d, opened)
	mapDeviceData, stagingMax = false, 64<<10
	defer func() { mapDeviceData, stagingMax = true, 32<<20 }()
	const n = 300_000 // bytes: five pieces of the 64 KiB area
	bufs := make([]*Buffer, 4)
	for i := range bufs {
		b, err := d.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.mapped != nil {
			t.Fatal("buffer mapped with mapping turned off")
		}
		bufs[i] = b
	}
	pattern := func(i int) []byte {
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(j*7 + i*13 + j/251)
		}
		return p
	}
	if err := bufs[0].Write(0, pattern(0)); err != nil { // creates the area
		t.Fatal(err)
	}
	before := d.AllocStats().Count
	errs := make(chan error, len(bufs))
	for i, b := range bufs {
		go func() {
			want := pattern(i)
			if err := b.Write(0, want); err != nil {
				errs <- err
				return
			}
			got := make([]byte, n)
			if err := b.Read(0, got); err != nil {
				errs <- err
				return
			}
			if !slices.Equal(got, want) {
				errs <- fmt.Errorf("buffer %d: read back differs from what was written", i)
				return
			}
			part := make([]byte, 1000)
			if err := b.Read(123_457, part); err != nil || !slices.Equal(part, want[123_457:124_457]) {
				errs <- fmt.Errorf("buffer %d: a read at an odd offset differs (%v)", i, err)
				return
			}
			errs <- nil
		}()
	}
	for range bufs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if grew := d.AllocStats().Count - before; grew != 0 {
		t.Errorf("transfers through an existing staging area allocated %d buffers", grew)
	}
}

// Where the device reports heap budgets (VK_EXT_memory_budget), a buffer
// tries the memory types whose heap has room for it first.
func TestMemoryTypesRespectHeapBudgets(t *testing.T) {
	const (
		dl = vulkan.MemoryPropertyDeviceLocalBit
		hv = vulkan.MemoryPropertyHostVisibleBit | vulkan.MemoryPropertyHostCoherentBit
	)
	d := &Device{Info: PhysicalDevice{DeviceInfo: core.DeviceInfo{Type: core.DeviceDiscrete}}}
	for i, f := range []vulkan.MemoryPropertyFlagBits{dl | hv, dl, hv} { // BAR window, VRAM, system memory
		d.memTypes.MemoryTypes[i].PropertyFlags = vulkan.MemoryPropertyFlags(f)
		d.memTypes.MemoryTypes[i].HeapIndex = uint32(i)
	}
	d.memTypes.MemoryTypeCount = 3
	real := heapRoom
	defer func() { heapRoom = real }()
	room := []uint64{1 << 30, 1 << 30, 1 << 30}
	heapRoom = func(*Device) ([]uint64, bool) { return room, true }
	const small, large = 256, 1 << 20
	for _, c := range []struct {
		what string
		room []uint64
		size uint64
		want []uint32
	}{
		{"room everywhere, small", []uint64{1 << 30, 1 << 30, 1 << 30}, small, []uint32{0, 1}},
		{"room everywhere, large", []uint64{1 << 30, 1 << 30, 1 << 30}, large, []uint32{1, 0}},
		{"BAR window over budget, small", []uint64{100, 1 << 30, 1 << 30}, small, []uint32{1, 0}},
		{"VRAM over budget, large", []uint64{1 << 30, large - 1, 1 << 30}, large, []uint32{0, 1}},
		{"both over budget: the usual order", []uint64{0, 0, 1 << 30}, large, []uint32{1, 0}},
	} {
		room = c.room
		if got := d.memoryTypesFor(0b111, c.size, deviceData); !slices.Equal(got, c.want) {
			t.Errorf("%s: types %v, want %v", c.what, got, c.want)
		}
	}
}

// Buffers count against their heap's size: once the live buffers fill it
// (here a heap capped at 1 MiB), the next allocation is ErrOutOfMemory
// naming the heap and the bytes asked, before any vkAllocateMemory, and
// leaves no object behind; freeing a buffer makes room again. A driver's
// own out-of-memory result is ErrOutOfMemory too.
func TestHeapsFillUp(t *testing.T) {
	inst, d, opened := openTestDevice(t)
	defer closeTestDevice(t, inst, d, opened)
	d.SetHeapLimit(1 << 20)
	defer d.SetHeapLimit(0)
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			b.Close()
		}
	}()
	var err error
	for i := 0; i < 8 && err == nil; i++ {
		var b *Buffer
		if b, err = d.NewBuffer(192 << 10); err == nil {
			bufs = append(bufs, b)
		}
	}
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "heap 0") || !strings.Contains(err.Error(), "196608 bytes asked") {
		t.Fatalf("allocating past a 1 MiB heap: %v, want ErrOutOfMemory naming heap 0 and the bytes asked", err)
	}
	if len(bufs) > 5 {
		t.Errorf("%d buffers of 192 KiB allocated on a 1 MiB heap", len(bufs))
	}
	before := LiveObjects()
	if _, err := d.NewBuffer(192 << 10); !errors.Is(err, ErrOutOfMemory) || LiveObjects() != before {
		t.Errorf("a refused buffer: %v, %d objects alive (%d before)", err, LiveObjects(), before)
	}
	bufs[0].Close()
	bufs = bufs[1:]
	b, err := d.NewBuffer(192 << 10)
	if err != nil {
		t.Fatalf("after freeing a buffer: %v", err)
	}
	bufs = append(bufs, b)

	real := allocateMemory
	allocateMemory = func(vulkan.Device, *vulkan.MemoryAllocateInfo, *vulkan.DeviceMemory) vulkan.Result {
		return vulkan.ErrorOutOfDeviceMemory
	}
	d.SetHeapLimit(0)
	_, err = d.NewBuffer(1024)
	allocateMemory = real
	if !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("the driver's out-of-memory result: %v, want ErrOutOfMemory", err)
	}
	if _, err := d.NewBuffer(d.Info.Limits.MaxMemoryAllocation + 16); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("a buffer beyond the largest heap: %v, want ErrOutOfMemory", err)
	}
}

// Live allocations stay within maxMemoryAllocationCount: the one past it
// is ErrOutOfMemory saying so, spares give their allocations back first,
// and freeing a buffer makes room.
func TestAllocationCountLimit(t *testing.T) {
	inst, d, opened := openTestDevice(t)
	defer closeTestDevice(t, inst, d, opened)
	spare, err := d.NewBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	spare.Close() // a spare now, holding its allocation
	limit := d.Info.Limits.MaxAllocations
	defer func() { d.Info.Limits.MaxAllocations = limit }()
	d.Info.Limits.MaxAllocations = uint32(len(d.buffers) + 3)
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			b.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		b, err := d.NewBuffer(1024) // not the spare's size: a new allocation each
		if err != nil {
			t.Fatalf("allocation %d of 3 within the limit: %v", i+1, err)
		}
		bufs = append(bufs, b)
	}
	_, err = d.NewBuffer(1024)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "maxMemoryAllocationCount") {
		t.Fatalf("an allocation past the limit: %v, want ErrOutOfMemory naming maxMemoryAllocationCount", err)
	}
	bufs[0].Close()
	bufs = bufs[1:]
	b, err := d.NewBuffer(1024)
	if err != nil {
		t.Fatalf("after freeing a buffer: %v", err)
	}
	bufs = append(bufs, b)
}

// No VkBuffer's size is a power of two (lavapipe would compile each kernel
// once more for such buffers), it holds what was asked, and padding stops
// at the largest allocation.
func TestVkBufferSizeIsNoPowerOfTwo(t *testing.T) {
	for size := uint64(16); size <= 1<<20; size += 16 {
		got := vkBufferSize(size, 0)
		if got&(got-1) == 0 || got < size || got > size+32 || got%16 != 0 {
			t.Fatalf("vkBufferSize(%d) = %d", size, got)
		}
	}
	if got := vkBufferSize(1<<20, 1<<20); got != 1<<20 {
		t.Errorf("vkBufferSize(1 MiB) with 1 MiB the largest allocation = %d", got)
	}
}
