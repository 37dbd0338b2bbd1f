package main

import (
	"fmt"
	"io"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
)

const devicesUsage = `Usage: vkattn devices [--json]

Lists every Vulkan device with a compute queue: its type, driver, Vulkan
version and the limits that decide what vkattn can run on it (largest
storage buffer, texel buffer elements, shared memory, subgroup size,
workgroup counts and sizes). The device marked '*' is the one picked when
--device is not given (discrete GPU > integrated > virtual > CPU).

Pick another device in other commands with --device N (its index here) or
--device NAME (part of its name).

lavapipe (llvmpipe, the CPU driver) runs subgroups as wide as its vectors:
8 lanes at 256 bits. On a CPU with AVX-512 vkattn asks it for 512 bits (16
lanes; prefill and the backward run 1.5x faster or more) unless
LP_NATIVE_VECTOR_WIDTH is set; LP_NATIVE_VECTOR_WIDTH=256 keeps llvmpipe's
own width.

Example:
  vkattn devices
  vkattn devices --json | jq '.devices[] | .name'
`

// deviceJSON is the --json form of one device. Field names are stable:
// scripts read them.
type deviceJSON struct {
	Index       int        `json:"index"`
	Name        string     `json:"name"`
	Type        string     `json:"type"`
	Default     bool       `json:"default"`
	VendorID    uint32     `json:"vendor_id"`
	DeviceID    uint32     `json:"device_id"`
	APIVersion  string     `json:"api_version"`
	DriverID    uint32     `json:"driver_id"`
	DriverName  string     `json:"driver_name"`
	DriverInfo  string     `json:"driver_info"`
	HostVisible bool       `json:"host_visible_device_memory"`
	TexelR32F   bool       `json:"texel_r32f"`
	Timestamps  bool       `json:"timestamps"`
	Limits      limitsJSON `json:"limits"`
	// CooperativeMatrices name each shape as "MxNxK A*B+C->Result (scope)".
	CooperativeMatrices []string `json:"cooperative_matrices"`
}

type limitsJSON struct {
	MaxStorageBufferRange   uint32    `json:"max_storage_buffer_range"`
	MaxTexelBufferElements  uint32    `json:"max_texel_buffer_elements"`
	MaxUniformBufferRange   uint32    `json:"max_uniform_buffer_range"`
	MaxPushConstantsSize    uint32    `json:"max_push_constants_size"`
	MaxSharedMemory         uint32    `json:"max_shared_memory"`
	SubgroupSize            uint32    `json:"subgroup_size"`
	SubgroupShuffle         bool      `json:"subgroup_shuffle"`
	MaxWorkGroupCount       [3]uint32 `json:"max_workgroup_count"`
	MaxWorkGroupSize        [3]uint32 `json:"max_workgroup_size"`
	MaxWorkGroupInvocations uint32    `json:"max_workgroup_invocations"`
	MaxMemoryAllocation     uint64    `json:"max_memory_allocation"`
	TimestampPeriodNS       float32   `json:"timestamp_period_ns"`
}

func toDeviceJSON(d vkattn.DeviceInfo, def int) deviceJSON {
	l := d.Limits
	matrices := []string{}
	for _, m := range d.CooperativeMatrices {
		matrices = append(matrices, m.String())
	}
	return deviceJSON{
		CooperativeMatrices: matrices,
		Index:               d.Index, Name: d.Name, Type: d.Type.String(), Default: d.Index == def,
		VendorID: d.VendorID, DeviceID: d.DeviceID, APIVersion: d.APIVersion,
		DriverID: d.DriverID, DriverName: d.DriverName, DriverInfo: d.DriverInfo,
		HostVisible: d.HostVisible, TexelR32F: d.TexelR32F, Timestamps: d.TimestampsOK,
		Limits: limitsJSON{
			MaxStorageBufferRange:   l.MaxStorageBufferRange,
			MaxTexelBufferElements:  l.MaxTexelBufferElements,
			MaxUniformBufferRange:   l.MaxUniformBufferRange,
			MaxPushConstantsSize:    l.MaxPushConstantsSize,
			MaxSharedMemory:         l.MaxSharedMemory,
			SubgroupSize:            l.SubgroupSize,
			SubgroupShuffle:         l.SubgroupShuffle,
			MaxWorkGroupCount:       l.MaxWorkGroupCount,
			MaxWorkGroupSize:        l.MaxWorkGroupSize,
			MaxWorkGroupInvocations: l.MaxWorkGroupInvocations,
			MaxMemoryAllocation:     l.MaxMemoryAllocation,
			TimestampPeriodNS:       l.TimestampPeriod,
		},
	}
}

func runDevices(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("devices", stderr)
	asJSON := fs.Bool("json", false, "print JSON: {\"default\": index, \"devices\": [...]}")
	if ok, code := parseFlags(fs, devicesUsage, args, stdout, stderr); !ok {
		return code
	}
	devs, def, err := vkattn.Devices()
	if err != nil {
		return failf(stderr, "devices", "%v", err)
	}
	if *asJSON {
		out := struct {
			Default int          `json:"default"`
			Devices []deviceJSON `json:"devices"`
		}{Default: def, Devices: []deviceJSON{}}
		for _, d := range devs {
			out.Devices = append(out.Devices, toDeviceJSON(d, def))
		}
		if err := printJSON(stdout, out); err != nil {
			return failf(stderr, "devices", "%v", err)
		}
		return exitOK
	}
	for i, d := range devs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printDevice(stdout, d, d.Index == def)
	}
	return exitOK
}

func printDevice(w io.Writer, d vkattn.DeviceInfo, isDefault bool) {
	mark, note := " ", ""
	if isDefault {
		mark, note = "*", "  (default)"
	}
	l := d.Limits
	fmt.Fprintf(w, "%s %d: %s [%s]%s\n", mark, d.Index, d.Name, d.Type, note)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(w, "    %-26s %s\n", k, fmt.Sprintf(format, args...))
	}
	row("driver", "%s (%s), driver id %d", d.DriverName, d.DriverInfo, d.DriverID)
	row("Vulkan API", "%s", d.APIVersion)
	row("vendor / device id", "0x%04x / 0x%04x", d.VendorID, d.DeviceID)
	row("max storage buffer range", "%d B (%s)", l.MaxStorageBufferRange, core.FormatBytes(uint64(l.MaxStorageBufferRange)))
	row("max texel buffer elements", "%d", l.MaxTexelBufferElements)
	row("shared memory", "%d B (%s)", l.MaxSharedMemory, core.FormatBytes(uint64(l.MaxSharedMemory)))
	row("subgroup size", "%d (shuffles in compute: %s)", l.SubgroupSize, yesNo(l.SubgroupShuffle))
	row("subgroup size control", "%s, sizes %d..%d, full subgroups %s", yesNo(d.SubgroupSizeControl), l.MinSubgroupSize, l.MaxSubgroupSize, yesNo(d.FullSubgroups))
	row("kernels' subgroup widths", "%s", plannedWidths(d))
	row("max workgroup count", "%d x %d x %d", l.MaxWorkGroupCount[0], l.MaxWorkGroupCount[1], l.MaxWorkGroupCount[2])
	row("max workgroup size", "%d x %d x %d (%d invocations)", l.MaxWorkGroupSize[0], l.MaxWorkGroupSize[1], l.MaxWorkGroupSize[2], l.MaxWorkGroupInvocations)
	row("push constants", "%d B", l.MaxPushConstantsSize)
	row("largest memory heap", "%s", core.FormatBytes(l.MaxMemoryAllocation))
	row("features", "R32F texel buffers %s, timestamps %s, host-visible device memory %s",
		yesNo(d.TexelR32F), yesNo(d.TimestampsOK), yesNo(d.HostVisible))
	if d.CooperativeMatrices == nil {
		row("cooperative matrices", "none (no VK_KHR_cooperative_matrix with float16)")
	}
	for i, m := range d.CooperativeMatrices {
		k := ""
		if i == 0 {
			k = "cooperative matrices"
		}
		row(k, "%v", m) // M x N x K A*B+C->Result (scope)
	}
}

// plannedWidths says which subgroup widths the planner plans kernels for
// on d: the tiled and matrix kernels require one size within the device's
// range (each plan names it) where it has size control with full
// subgroups and shuffles; the row kernels assume none, but their shared
// K/V loads need a device that runs a single width.
func plannedWidths(d vkattn.DeviceInfo) string {
	l := d.Limits
	tiled := fmt.Sprintf("tiled and matrix kernels require full subgroups of one size in %d..%d (Plan names it)", l.MinSubgroupSize, l.MaxSubgroupSize)
	if !d.SubgroupSizeControl || !d.FullSubgroups || !l.SubgroupShuffle {
		tiled = "no tiled or matrix kernels (they need subgroup size control with full subgroups and shuffles)"
	}
	rows := "row kernels any width, without shared K/V loads (no single width)"
	if d.SubgroupSizeControl && l.SubgroupShuffle && l.MinSubgroupSize == l.SubgroupSize && l.MaxSubgroupSize == l.SubgroupSize {
		rows = fmt.Sprintf("row kernels any width, shared K/V loads at %d", l.SubgroupSize)
	}
	return tiled + "; " + rows
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
