package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/pipelines/dispatch"
	"github.com/vkattn/vkattn/vk"
)

// The device's configuration and counters are package core's (cgo-free),
// which the root package re-exports.
type (
	Config      = core.Config
	MemoryModel = core.MemoryModel
	Stats       = core.Stats
)

const (
	AutoMemory     = core.AutoMemory
	DiscreteMemory = core.DiscreteMemory
)

// ParseMemoryModel reads the names a MemoryModel prints.
func ParseMemoryModel(s string) (MemoryModel, error) { return core.ParseMemoryModel(s) }

// discrete reports whether cfg places buffers as on a discrete GPU.
func discrete(cfg Config) bool {
	vendor, _, err := planAs(cfg)
	return cfg.Memory == DiscreteMemory || err == nil && vendor != "" && vendor != "lavapipe"
}

// planAs is the vendor cfg plans as, from PlanAs or VKATTN_PLAN_AS ("" for
// the device's own), with its tuning.
func planAs(cfg Config) (string, core.Tuning, error) {
	vendor := cfg.PlanAs
	if vendor == "" {
		vendor = os.Getenv("VKATTN_PLAN_AS")
	}
	if vendor == "" {
		return "", core.Tuning{}, nil
	}
	t, err := pipelines.VendorTuning(vendor)
	if err != nil {
		return "", t, errorf(core.ErrOption, "plan as: %v", err)
	}
	return vendor, t, nil
}

// Device is an open Vulkan device with everything vkattn made on it.
//
// A Device is safe for concurrent use, like an *sql.DB: share one among
// goroutines. So are the tensors, calls and layers made on it: calls from
// different goroutines record and wait independently and take turns only
// at queue submission; the runs of one prepared call take turns. Close
// may come at any time: it waits for work in flight, frees everything
// made on the device (open calls included), and every later use returns
// an error wrapping ErrClosed (a Close of something already freed is a
// no-op).
type Device struct {
	mu       sync.Mutex // guards tuning and tensors; Close holds it
	instance *vk.Instance
	dev      *vk.Device
	kernels  *dispatch.Kernels
	path     core.LoadPath
	tuning   core.Tuning
	tensors  map[*Tensor]struct{}
	closed   atomic.Bool
	memory   MemoryModel
	// plannedAs is the vendor of PlanAsVendors d plans as ("": its own
	// driver's plan).
	plannedAs string
}

// Devices lists every Vulkan device with a compute queue and the index the
// default choice would take.
func Devices() ([]core.DeviceInfo, int, error) {
	inst, err := vk.NewInstance(vk.InstanceConfig{})
	if err != nil {
		return nil, 0, driverError(err)
	}
	defer inst.Close()
	def, err := inst.DefaultDevice()
	if err != nil {
		return nil, 0, driverError(err)
	}
	var infos []core.DeviceInfo
	for _, pd := range inst.Devices() {
		infos = append(infos, pd.DeviceInfo)
	}
	return infos, def, nil
}

// Open opens a device.
func Open(cfg Config) (*Device, error) {
	if _, _, err := planAs(cfg); err != nil {
		return nil, err
	}
	if !cfg.LoadPath.Valid() {
		return nil, errorf(core.ErrOption, "load path %v (want AutoLoadPath, TexelLoadPath or StorageLoadPath)", cfg.LoadPath)
	}
	if _, err := ParseMemoryModel(cfg.Memory.String()); err != nil {
		return nil, err
	}
	validation := cfg.Validation || os.Getenv("VKATTN_VALIDATION") == "1"
	inst, err := vk.NewInstance(vk.InstanceConfig{Validation: validation})
	if err != nil {
		return nil, DeviceError(driverError(err))
	}
	idx, err := inst.FindDevice(cfg.Device)
	if err != nil {
		inst.Close()
		return nil, DeviceError(driverError(err))
	}
	dev, err := inst.NewDevice(idx)
	if err != nil {
		inst.Close()
		return nil, DeviceError(err)
	}
	return openOn(inst, dev, cfg), nil
}

// TuningFile is where SaveTuning keeps the tuning of a device: in the user
// cache directory, named by the device and driver build.
func TuningFile(info core.DeviceInfo) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "vkattn", "tuning-"+info.CacheKey()+".json"), nil
}

// LoadTuning reads the tuning saved for a device.
func LoadTuning(info core.DeviceInfo) (core.Tuning, error) {
	var t core.Tuning
	path, err := TuningFile(info)
	if err != nil {
		return t, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("vkattn: tuning file %s: %w", path, err)
	}
	return t, nil
}

// SaveTuning checks t against the device and saves it where Open finds it
// (TuningFile); it also becomes d's tuning. It returns the file's path.
func (d *Device) SaveTuning(t core.Tuning) (string, error) {
	if err := d.SetTuning(t); err != nil {
		return "", err
	}
	path, err := TuningFile(d.dev.Info.DeviceInfo)
	if err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(data, '\n'), 0o644)
}

// Tuning is the tuning the planner uses on d.
func (d *Device) Tuning() core.Tuning {
	if d == nil {
		return core.Tuning{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tuning.Clone()
}

// SetTuning makes the planner use t for later calls on d (calls already
// prepared keep theirs); `vkattn tune` tries candidates with it.
func (d *Device) SetTuning(t core.Tuning) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if err := t.Check(d.dev.Info.DeviceInfo); err != nil {
		return errorf(core.ErrTuning, "%v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tuning = t.Clone()
	return nil
}

// PlannedAs is the vendor d plans as (Config.PlanAs or VKATTN_PLAN_AS),
// or "" when it plans as its own driver's quirk table or tuning says.
func (d *Device) PlannedAs() string {
	if d == nil {
		return ""
	}
	return d.plannedAs
}

// Memory is how d places its buffers (Config.Memory, implied by PlanAs).
func (d *Device) Memory() MemoryModel {
	if d == nil {
		return AutoMemory
	}
	return d.memory
}

// Info describes the open device.
func (d *Device) Info() core.DeviceInfo {
	if d == nil {
		return core.DeviceInfo{}
	}
	return d.dev.Info.DeviceInfo
}

// Stats returns the device's counts.
func (d *Device) Stats() Stats {
	if d == nil {
		return Stats{}
	}
	a := d.dev.AllocStats()
	return Stats{Live: a.Live, Peak: a.Peak, Largest: a.Largest, Allocations: a.Count, Pools: a.Pools,
		Commands: a.Commands, Submits: a.Submits, Waits: a.Waits, StagingBytes: a.StagingBytes}
}

// ResetAllocStats restarts peak and largest-allocation tracking.
func (d *Device) ResetAllocStats() {
	if d != nil {
		d.dev.ResetAllocStats()
	}
}

// Close frees every tensor, kernel and buffer made on the device and the
// device itself. Safe to call more than once.
func (d *Device) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil
	}
	d.closed.Store(true)
	for t := range d.tensors {
		t.closed.Store(true)
	}
	d.tensors = nil
	// The vk device waits for work in flight (a cancelled call's) and
	// frees every object made on it, those of open calls included; the
	// kernel library's Close then only forgets them.
	err := d.dev.Close()
	d.kernels.Close()
	d.instance.Close()
	return DeviceError(err)
}

func (d *Device) checkOpen() error {
	if d == nil {
		return errorf(core.ErrClosed, "no device: the *Device is nil")
	}
	if d.closed.Load() {
		return errorf(core.ErrClosed, "device %s is closed", d.dev.Info.Name)
	}
	return nil
}

// ValidationMessages returns every message the Vulkan validation layer has
// reported in this process.
func ValidationMessages() []string { return vk.ValidationMessages() }

// LiveObjects is the number of Vulkan objects vkattn has alive in this
// process; zero after every Device is closed.
func LiveObjects() int64 { return vk.LiveObjects() }

func (d *Device) String() string {
	if d == nil {
		return "no device"
	}
	i := d.dev.Info
	return fmt.Sprintf("%s (%s, %s)", i.Name, i.Type, i.DriverName)
}

// ident tells d apart from other devices open on the same GPU, for
// messages about tensors of the wrong device.
func (d *Device) ident() string {
	return fmt.Sprintf("device #%d (%s, GPU index %d)", d.dev.Serial(), d.dev.Info.Name, d.dev.Info.Index)
}
