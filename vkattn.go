package vkattn

import (
	"github.com/vkattn/vkattn/internal/engine"
)

// The attention API's types. They are defined in internal/engine, which
// packages kv and nn build on too; each name here is the same type.
type (
	// Config chooses and configures a device for Open.
	Config = engine.Config
	// MemoryModel is how a device's buffers are placed (Config.Memory).
	MemoryModel = engine.MemoryModel
	// Device is an open Vulkan device with everything vkattn made on it;
	// safe for concurrent use.
	Device = engine.Device
	// SharedDevice is a Vulkan device a host program made with vulkan-go
	// and shares with vkattn (OpenOn).
	SharedDevice = engine.SharedDevice
	// Stats counts what a device's work costs beyond the kernels
	// themselves (Device.Stats).
	Stats = engine.Stats
	// Tensor is data on a device, viewed as four axes (batch, heads,
	// positions, width).
	Tensor = engine.Tensor
	// DeviceBuffer is where a tensor's values live on the device
	// (Tensor.Buffer).
	DeviceBuffer = engine.DeviceBuffer
	// Plan says what the device will run for a problem (Device.Plan).
	Plan = engine.Plan
	// KernelPlan is the attention kernel the planner chose for a call.
	KernelPlan = engine.KernelPlan
	// Call is an attention call prepared once and replayed by Run
	// (Device.Prepare).
	Call = engine.Call
	// Output is the result of Attention; Close it to free the device
	// memory.
	Output = engine.Output
	// Gradients are the result of AttentionBackward.
	Gradients = engine.Gradients
	// Part is one partial attention of a Merge.
	Part = engine.Part
)

const (
	// AutoMemory maps the buffers the host can map and stages the rest.
	AutoMemory = engine.AutoMemory
	// DiscreteMemory maps none of the data buffers, as on a discrete GPU.
	DiscreteMemory = engine.DiscreteMemory
)

// Open opens a device.
func Open(cfg Config) (*Device, error) { return engine.Open(cfg) }

// OpenOn makes a Device on a host program's Vulkan device; see
// SharedDevice for what the host enables and keeps.
func OpenOn(h SharedDevice, cfg Config) (*Device, error) { return engine.OpenOn(h, cfg) }

// Devices lists every Vulkan device with a compute queue and the index the
// default choice would take.
func Devices() ([]DeviceInfo, int, error) { return engine.Devices() }

// ParseMemoryModel reads the names a MemoryModel prints: auto or discrete.
func ParseMemoryModel(s string) (MemoryModel, error) { return engine.ParseMemoryModel(s) }

// TuningFile is where Device.SaveTuning keeps the tuning of a device: in
// the user cache directory, named by the device and driver build.
func TuningFile(info DeviceInfo) (string, error) { return engine.TuningFile(info) }

// LoadTuning reads the tuning saved for a device.
func LoadTuning(info DeviceInfo) (Tuning, error) { return engine.LoadTuning(info) }

// ValidationMessages returns every message the Vulkan validation layer has
// reported in this process.
func ValidationMessages() []string { return engine.ValidationMessages() }

// LiveObjects is the number of Vulkan objects vkattn has alive in this
// process; zero after every Device is closed.
func LiveObjects() int64 { return engine.LiveObjects() }
