package vkattn

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/vk"
)

// LoadPath is how the attention kernel reads Q, K, V and masks; the planner
// picks it per device unless Config forces one.
type LoadPath = pipelines.LoadPath

const (
	AutoLoadPath    = pipelines.AutoPath
	TexelLoadPath   = pipelines.TexelPath
	StorageLoadPath = pipelines.StoragePath
)

// DeviceInfo describes a Vulkan device: name, type, driver and limits.
type DeviceInfo = vk.PhysicalDevice

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
}

// Device is an open Vulkan device with everything vkattn made on it.
// Methods are safe for use by one goroutine at a time.
type Device struct {
	mu       sync.Mutex
	instance *vk.Instance
	dev      *vk.Device
	kernels  *pipelines.Kernels
	path     LoadPath
	tensors  map[*Tensor]struct{}
	closed   bool
}

// Devices lists every Vulkan device with a compute queue and the index the
// default choice would take.
func Devices() ([]DeviceInfo, int, error) {
	inst, err := vk.NewInstance(vk.InstanceConfig{})
	if err != nil {
		return nil, 0, err
	}
	defer inst.Close()
	def, err := inst.DefaultDevice()
	if err != nil {
		return nil, 0, err
	}
	return inst.Devices(), def, nil
}

// Open opens a device.
func Open(cfg Config) (*Device, error) {
	validation := cfg.Validation || os.Getenv("VKATTN_VALIDATION") == "1"
	inst, err := vk.NewInstance(vk.InstanceConfig{Validation: validation})
	if err != nil {
		return nil, err
	}
	idx, err := inst.FindDevice(cfg.Device)
	if err != nil {
		inst.Close()
		return nil, err
	}
	dev, err := inst.NewDevice(idx)
	if err != nil {
		inst.Close()
		return nil, err
	}
	return &Device{
		instance: inst,
		dev:      dev,
		kernels:  pipelines.NewKernels(dev),
		path:     cfg.LoadPath,
		tensors:  map[*Tensor]struct{}{},
	}, nil
}

// Info describes the open device.
func (d *Device) Info() DeviceInfo { return d.dev.Info }

// AllocStats reports the device's buffer allocations (see vk.AllocStats).
func (d *Device) AllocStats() vk.AllocStats { return d.dev.AllocStats() }

// ResetAllocStats restarts peak and largest-allocation tracking.
func (d *Device) ResetAllocStats() { d.dev.ResetAllocStats() }

// Close frees every tensor, kernel and buffer made on the device and the
// device itself. Safe to call more than once.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	// Work a cancelled call left running must finish before its buffers go;
	// a failed wait is reported, but everything is still freed.
	waitErr := d.dev.WaitIdle()
	for t := range d.tensors {
		t.release()
	}
	d.kernels.Close()
	err := d.dev.Close()
	d.instance.Close()
	return errors.Join(waitErr, err)
}

func (d *Device) checkOpen() error {
	if d.closed {
		return errorf(ErrClosed, "device %s is closed", d.dev.Info.Name)
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
	i := d.dev.Info
	return fmt.Sprintf("%s (%s, %s)", i.Name, i.Type, i.DriverName)
}
