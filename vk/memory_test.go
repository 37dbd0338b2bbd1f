package vk

import (
	"errors"
	"slices"
	"testing"

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
	d := &Device{}
	for i, f := range []vulkan.MemoryPropertyFlagBits{dl | hv, dl, hv} {
		d.memTypes.MemoryTypes[i].PropertyFlags = vulkan.MemoryPropertyFlags(f)
	}
	d.memTypes.MemoryTypeCount = 3
	if got := d.memoryTypesFor(0b111, false); !slices.Equal(got, []uint32{0, 1}) {
		t.Errorf("device buffers try types %v, want the BAR window then device memory [0 1]", got)
	}
	if got := d.memoryTypesFor(0b111, true); !slices.Equal(got, []uint32{2}) {
		t.Errorf("staging buffers try types %v, want system memory [2], not the BAR window", got)
	}
	if got := d.memoryTypesFor(0b010, false); !slices.Equal(got, []uint32{1}) {
		t.Errorf("a buffer allowed only type 1 tries %v", got)
	}
	// lavapipe's one type: device-local, mappable, coherent.
	one := &Device{}
	one.memTypes.MemoryTypes[0].PropertyFlags = vulkan.MemoryPropertyFlags(dl | hv)
	one.memTypes.MemoryTypeCount = 1
	if got, stage := one.memoryTypesFor(1, false), one.memoryTypesFor(1, true); !slices.Equal(got, []uint32{0}) || !slices.Equal(stage, []uint32{0}) {
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
