package core

import "fmt"

// Config chooses and configures a device for Open.
type Config struct {
	// Device picks the device: "" for the best available (discrete GPU >
	// integrated > virtual > CPU), a number for an index as listed by
	// Devices, or part of a device name.
	Device string
	// Validation turns on VK_LAYER_KHRONOS_validation; its messages are
	// returned by ValidationMessages. The environment variable
	// VKATTN_VALIDATION=1 turns it on too.
	Validation bool
	// LoadPath forces a load path for the attention kernel (testing and
	// benchmarking); AutoLoadPath lets the planner choose.
	LoadPath LoadPath
	// DefaultTuning ignores a tuning saved by `vkattn tune` (SaveTuning)
	// and plans with the quirk-table defaults of the device's driver.
	DefaultTuning bool
	// BindingLimit, if positive, lowers the bytes one buffer binding may
	// reach below the device's maxStorageBufferRange and texel limits, so
	// the split of calls larger than a binding can be tested on small data.
	BindingLimit uint32
	// PlanAs plans as the quirk table says for another vendor's driver:
	// "nvidia", "amd", "intel" or "lavapipe" (PlanAsVendors), on whatever
	// device is open, so the GPU kernels run (slowly) on lavapipe in CI.
	// The device's own limits still apply. The environment variable
	// VKATTN_PLAN_AS does the same where PlanAs is empty; either way a
	// saved tuning is ignored.
	PlanAs string
	// MemoryLimit, if positive, caps the bytes vkattn's buffers take on
	// each memory heap below the heap's size; beyond it (or the heap's
	// size) an allocation is ErrTooLarge naming the heap.
	MemoryLimit uint64
	// Memory is how buffers are placed: AutoMemory as the device allows,
	// DiscreteMemory as on a discrete GPU on any device. Planning as a GPU
	// vendor (PlanAs) implies DiscreteMemory, so those plans run the code a
	// discrete GPU runs.
	Memory MemoryModel
}

// MemoryModel is how a device's buffers are placed (Config.Memory).
type MemoryModel int

const (
	// AutoMemory maps the buffers the host can map (all of them on
	// lavapipe and integrated GPUs) and stages the rest.
	AutoMemory MemoryModel = iota
	// DiscreteMemory maps none of the data buffers: every host write and
	// read goes through the staging area, a submission and a wait each,
	// as on a discrete GPU whose memory the host cannot see.
	DiscreteMemory
)

var memoryModelNames = [...]string{"auto", "discrete"}

func (m MemoryModel) String() string {
	if m < 0 || int(m) >= len(memoryModelNames) {
		return fmt.Sprintf("MemoryModel(%d)", int(m))
	}
	return memoryModelNames[m]
}

// ParseMemoryModel reads the names a MemoryModel prints: auto or discrete.
func ParseMemoryModel(s string) (MemoryModel, error) {
	for m, name := range memoryModelNames {
		if name == s {
			return MemoryModel(m), nil
		}
	}
	return AutoMemory, Errorf(ErrOption, "unknown memory model %q (want auto or discrete)", s)
}

// Stats counts what a device's work costs beyond the kernels themselves:
// memory and objects created, and the round trips to the device. On a
// discrete GPU each submission and each host wait costs tens of
// microseconds and allocations are slow and limited in number; lavapipe
// counts the same as a GPU would (use DiscreteMemory for its transfers).
type Stats struct {
	Live    uint64 // bytes in live buffers
	Peak    uint64 // most bytes live at once (since ResetAllocStats)
	Largest uint64 // the largest buffer allocated (since ResetAllocStats)
	// Counters since Open:
	Allocations  int    // device memory allocations (vkAllocateMemory)
	Pools        int    // descriptor pools created
	Commands     int    // command buffers created, each with its pool and fence
	Submits      int    // queue submissions
	Waits        int    // host waits for a submission to finish
	StagingBytes uint64 // bytes between the host and device buffers through host-visible staging buffers
}

// Since is the counters' growth from before to s (the byte totals are
// s's own).
func (s Stats) Since(before Stats) Stats {
	s.Allocations -= before.Allocations
	s.Pools -= before.Pools
	s.Commands -= before.Commands
	s.Submits -= before.Submits
	s.Waits -= before.Waits
	s.StagingBytes -= before.StagingBytes
	return s
}
