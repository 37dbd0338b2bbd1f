package pipelines

import (
	"github.com/vkattn/vkattn/core"
)

// Real devices' descriptions, as their drivers report them: the limits,
// subgroup sizes and features the planner reads (core.DeviceInfo), for
// planning on every vendor's hardware without it. Each entry names where
// its numbers come from: the driver's source where it is public (Mesa,
// MoltenVK), else the values vulkan.gpuinfo.org's reports of such devices
// show; a number neither gives is marked as the vendor's documented value
// or a conservative assumption (a smaller limit than the device likely
// has, which only makes the planner's job harder).

// Vulkan driver IDs (VkDriverId) of the table's drivers that core does
// not name.
const (
	driverIDQualcomm    = 8  // VK_DRIVER_ID_QUALCOMM_PROPRIETARY
	driverIDArm         = 9  // VK_DRIVER_ID_ARM_PROPRIETARY
	driverIDSwiftShader = 10 // VK_DRIVER_ID_GOOGLE_SWIFTSHADER
	driverIDMoltenVK    = 14 // VK_DRIVER_ID_MOLTENVK
)

// matrices are subgroup-scope cooperative matrix shapes of
// VK_KHR_cooperative_matrix, A and B of type ab, C and Result of type c.
func matrices(ab, c core.MatrixType, shapes ...[3]int) []core.CooperativeMatrix {
	var ms []core.CooperativeMatrix
	for _, s := range shapes {
		ms = append(ms, core.CooperativeMatrix{M: s[0], N: s[1], K: s[2], A: ab, B: ab, C: c, Result: c, Scope: core.MatrixSubgroup})
	}
	return ms
}

// texels marks d's R32F and raw-word texel formats usable (every device
// in the table has them: they are among Vulkan's required buffer formats).
func texels(d core.DeviceInfo) core.DeviceInfo {
	d.TexelR32F, d.TexelWords, d.TexelWords4 = true, true, true
	return d
}

// limits is a table entry's compute limits, in the order the entries
// give them: storage buffer range, texel buffer elements, uniform buffer
// range, push-constant bytes, shared memory; the grid, the workgroup size
// and invocations; the storage and texel offset alignment, the uniform
// one; the subgroup size, least and most. Every device in the table has
// subgroup shuffles in compute.
func limits(storage, texels, uniform, push, shared uint32, grid, size [3]uint32, invocations uint32,
	align, uniformAlign uint64, subgroup, minSubgroup, maxSubgroup uint32) core.Limits {
	return core.Limits{
		MaxStorageBufferRange: storage, MaxTexelBufferElements: texels, MaxUniformBufferRange: uniform, MaxPushConstantsSize: push,
		MaxSharedMemory: shared, MaxWorkGroupCount: grid, MaxWorkGroupSize: size, MaxWorkGroupInvocations: invocations,
		MinStorageAlignment: align, MinTexelAlignment: align, MinUniformAlignment: uniformAlign,
		SubgroupSize: subgroup, MinSubgroupSize: minSubgroup, MaxSubgroupSize: maxSubgroup, SubgroupShuffle: true,
	}
}

// realDevices is the table.
func realDevices() []core.DeviceInfo {
	// NVIDIA's proprietary driver reports the same compute limits from
	// Turing to Hopper (vulkan.gpuinfo.org, RTX 3090 and RTX 4090 reports):
	// 48 KiB of shared memory (the CUDA opt-in above 48 KiB has no Vulkan
	// form), warps of 32 with size control fixing them at 32, a grid of
	// 2^31-1 x 65535 x 65535, 1024 invocations (64 in z), 4 GiB - 1 of
	// storage range, 2^27 texels, 256 B of push constants, 16 B offset
	// alignments. Cooperative matrices (VK_KHR_cooperative_matrix,
	// driver 535+): float16 16x16x16, 16x8x16 and 16x8x8 with float16 or
	// float32 accumulators.
	nvidiaMatrices := append(matrices(core.MatrixFloat16, core.MatrixFloat16, [3]int{16, 16, 16}, [3]int{16, 8, 16}, [3]int{16, 8, 8}),
		matrices(core.MatrixFloat16, core.MatrixFloat32, [3]int{16, 16, 16}, [3]int{16, 8, 16}, [3]int{16, 8, 8})...)
	nvidia := func(name string, deviceID uint32) core.DeviceInfo {
		return texels(core.DeviceInfo{
			Name: name, Type: core.DeviceDiscrete, VendorID: 0x10de, DeviceID: deviceID, APIVersion: "1.3.277",
			DriverID: core.DriverIDNvidia, DriverName: "NVIDIA", DriverInfo: "550.54",
			SubgroupSizeControl: true, FullSubgroups: true, CooperativeMatrices: nvidiaMatrices,
			Limits: limits(1<<32-1, 1<<27, 65536, 256, 49152, [3]uint32{1<<31 - 1, 65535, 65535}, [3]uint32{1024, 1024, 64}, 1024,
				16, 64, 32, 32, 32),
		})
	}
	// RADV (Mesa's radv_physical_device.c): wave64 by default; GFX10+
	// (RDNA) offers 32..64 with compute among requiredSubgroupSizeStages,
	// GFX9 and older (GCN) 64..64 with no stage that may require a size,
	// which vkattn counts as no size control. 64 KiB of shared memory
	// (GFX7+), a grid of 2^32-1 x 65535 x 65535, 1024 invocations in any
	// axis, 4 GiB - 1 of storage range and texels, 256 B of push
	// constants, 4 B offset alignments. RDNA3 (GFX11) lists float16
	// 16x16x16 matrices (Mesa 24.1+).
	radv := func(name string, deviceID uint32, rdna bool, ms []core.CooperativeMatrix) core.DeviceInfo {
		min := uint32(64)
		if rdna {
			min = 32
		}
		return texels(core.DeviceInfo{
			Name: name, Type: core.DeviceDiscrete, VendorID: 0x1002, DeviceID: deviceID, APIVersion: "1.3.278",
			DriverID: core.DriverIDMesaRADV, DriverName: "radv", DriverInfo: "Mesa 24.1.0",
			SubgroupSizeControl: rdna, FullSubgroups: rdna, CooperativeMatrices: ms,
			Limits: limits(1<<32-1, 1<<32-1, 1<<32-1, 256, 65536, [3]uint32{1<<32 - 1, 65535, 65535}, [3]uint32{1024, 1024, 1024}, 1024,
				4, 4, 64, min, 64),
		})
	}
	return []core.DeviceInfo{
		nvidia("NVIDIA GeForce RTX 3090 (Ampere)", 0x2204),
		// H100: the same driver's limits (gpuinfo has few Hopper reports;
		// 48 KiB is what the driver exposes on every part above).
		nvidia("NVIDIA H100 PCIe (Hopper)", 0x2331),
		radv("AMD Radeon RX Vega 64 (GCN, RADV)", 0x687f, false, nil),
		radv("AMD Radeon RX 6800 XT (RDNA2, RADV)", 0x73bf, true, nil),
		radv("AMD Radeon RX 7900 XTX (RDNA3, RADV)", 0x744c, true, append(
			matrices(core.MatrixFloat16, core.MatrixFloat16, [3]int{16, 16, 16}),
			matrices(core.MatrixFloat16, core.MatrixFloat32, [3]int{16, 16, 16})...)),
		// Intel Arc A770 on ANV (Mesa's anv_physical_device.c): SIMD8..32
		// with size control, subgroupSize 32, 64 KiB of shared memory, a
		// 65535^3 grid, 1024 invocations; storage range 1 GiB (a
		// conservative assumption: newer Mesa reports up to 4 GiB - 1),
		// 2^27 texels, 128 B of push constants (conservative), 64 B offset
		// alignments (conservative). DG2's matrices are 8x8x16 (M x N x K),
		// a shape the planner does not use.
		texels(core.DeviceInfo{
			Name: "Intel(R) Arc(tm) A770 Graphics (DG2)", Type: core.DeviceDiscrete, VendorID: 0x8086, DeviceID: 0x56a0, APIVersion: "1.3.278",
			DriverID: core.DriverIDIntelMesa, DriverName: "Intel open-source Mesa driver", DriverInfo: "Mesa 24.1.0",
			SubgroupSizeControl: true, FullSubgroups: true,
			CooperativeMatrices: append(matrices(core.MatrixFloat16, core.MatrixFloat16, [3]int{8, 8, 16}), matrices(core.MatrixFloat16, core.MatrixFloat32, [3]int{8, 8, 16})...),
			Limits: limits(1<<30, 1<<27, 1<<30, 128, 65536, [3]uint32{65535, 65535, 65535}, [3]uint32{1024, 1024, 1024}, 1024,
				64, 64, 32, 8, 32),
		}),
		// Intel Iris Xe (integrated) on Intel's Windows driver (gpuinfo
		// reports): SIMD8..32 with size control, subgroupSize 32, 64 KiB of
		// shared memory (the documented SLM per workgroup), 1024
		// invocations, a 65535^3 grid (conservative); storage range 2 GiB
		// (conservative), 2^27 texels.
		texels(core.DeviceInfo{
			Name: "Intel(R) Iris(R) Xe Graphics", Type: core.DeviceIntegrated, VendorID: 0x8086, DeviceID: 0x9a49, APIVersion: "1.3.260",
			DriverID: core.DriverIDIntelWindows, DriverName: "Intel Corporation", DriverInfo: "101.5333",
			SubgroupSizeControl: true, FullSubgroups: true,
			Limits: limits(1<<31, 1<<27, 1<<27, 256, 65536, [3]uint32{65535, 65535, 65535}, [3]uint32{1024, 1024, 64}, 1024,
				64, 64, 32, 8, 32),
		}),
		// Intel HD Graphics 630 on an old Vulkan 1.1 Windows driver without
		// VK_EXT_subgroup_size_control: it reports subgroupSize 32 (vkattn
		// then takes 32..32) but runs compute at SIMD8..32. Limits as the
		// Iris Xe's, 32 KiB of shared memory (conservative).
		texels(core.DeviceInfo{
			Name: "Intel(R) HD Graphics 630 (Vulkan 1.1, no size control)", Type: core.DeviceIntegrated, VendorID: 0x8086, DeviceID: 0x5912, APIVersion: "1.1.97",
			DriverID: core.DriverIDIntelWindows, DriverName: "Intel Corporation", DriverInfo: "100.7463",
			Limits: limits(1<<30, 1<<27, 1<<27, 256, 32768, [3]uint32{65535, 65535, 65535}, [3]uint32{1024, 1024, 64}, 1024,
				64, 64, 32, 32, 32),
		}),
		// Apple M1 through MoltenVK (MVKDevice.mm): subgroupSize 32 with
		// sizes 4..32 (4 is MoltenVK's guess) and requiredSubgroupSizeStages
		// 0, so no size control in compute; shuffles (simd_shuffle);
		// maxThreadgroupMemoryLength 32 KiB; 1024 threads a threadgroup in
		// any axis; workgroup counts unbounded (taken as 2^31-1,
		// conservative); storage range min(maxBufferLength, 4 GiB - 1);
		// maxImageDimension2D * 4096 = 2^26 texels; 4 KiB of push
		// constants; 16 B offset alignments; no cooperative matrices.
		texels(core.DeviceInfo{
			Name: "Apple M1 (MoltenVK)", Type: core.DeviceIntegrated, VendorID: 0x106b, DeviceID: 0x1a020209, APIVersion: "1.2.283",
			DriverID: driverIDMoltenVK, DriverName: "MoltenVK", DriverInfo: "1.2.9",
			Limits: limits(1<<32-1, 1<<26, 1<<32-1, 4096, 32768, [3]uint32{1<<31 - 1, 1<<31 - 1, 1<<31 - 1}, [3]uint32{1024, 1024, 1024}, 1024,
				16, 16, 32, 4, 32),
		}),
		// Arm Mali-G78 (Valhall) on Arm's driver (gpuinfo reports):
		// subgroups of 16, 32 KiB of shared memory, 512 invocations, a
		// 65535^3 grid, 2^27 B of storage range and 2^16 texels; size
		// control taken as absent (conservative: it is not in every
		// report), 16 B offset alignments, 128 B of push constants.
		texels(core.DeviceInfo{
			Name: "Mali-G78", Type: core.DeviceIntegrated, VendorID: 0x13b5, DeviceID: 0x92020010, APIVersion: "1.1.177",
			DriverID: driverIDArm, DriverName: "Mali", DriverInfo: "r32p1",
			Limits: limits(1<<27, 1<<16, 65536, 128, 32768, [3]uint32{65535, 65535, 65535}, [3]uint32{512, 512, 512}, 512,
				16, 16, 16, 16, 16),
		}),
		// Qualcomm Adreno 740 on Qualcomm's driver (gpuinfo reports): waves
		// of 64 or 128 with size control and full subgroups, subgroupSize
		// 64, 32 KiB of shared memory, 1024 invocations (64 in z), a
		// 65535^3 grid, storage range 1 GiB (conservative), 2^27 texels,
		// 64 B offset alignments, 128 B of push constants.
		texels(core.DeviceInfo{
			Name: "Adreno (TM) 740", Type: core.DeviceIntegrated, VendorID: 0x5143, DeviceID: 0x43050a01, APIVersion: "1.3.128",
			DriverID: driverIDQualcomm, DriverName: "Qualcomm Technologies Inc. Adreno Vulkan Driver", DriverInfo: "512.676",
			SubgroupSizeControl: true, FullSubgroups: true,
			Limits: limits(1<<30, 1<<27, 65536, 128, 32768, [3]uint32{65535, 65535, 65535}, [3]uint32{1024, 1024, 64}, 1024,
				64, 64, 64, 64, 128),
		}),
		// SwiftShader (Google's CPU driver; its VkConfig.hpp and
		// VkPhysicalDevice.cpp): SIMD width 4, 32 KiB of shared memory, 256
		// invocations (64 in z), a 65535^3 grid, 2^16 texels; storage range
		// 2^27 B and 256 B offset alignments (conservative), 128 B of push
		// constants; no size control taken (conservative).
		texels(core.DeviceInfo{
			Name: "SwiftShader Device (Subzero)", Type: core.DeviceCPU, VendorID: 0x1ae0, DeviceID: 0xc0de, APIVersion: "1.3.0",
			DriverID: driverIDSwiftShader, DriverName: "SwiftShader driver", DriverInfo: "5.0.0",
			Limits: limits(1<<27, 1<<16, 65536, 128, 32768, [3]uint32{65535, 65535, 65535}, [3]uint32{256, 256, 64}, 256,
				256, 256, 4, 4, 4),
		}),
		// lavapipe, Mesa 22.3.6, as `vkattn devices` reports it on the
		// project's CI machine: subgroups fixed at 8 with size
		// control and full subgroups, 32 KiB of shared memory, a 65535^3
		// grid, 128 MiB of storage range and 2^27 texels, 128 B of push
		// constants, 16 B alignments; its loop limiter applies.
		texels(core.DeviceInfo{
			Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Type: core.DeviceCPU, VendorID: 0x10005, APIVersion: "1.3.230",
			DriverID: core.DriverIDLavapipe, DriverName: "llvmpipe", DriverInfo: "Mesa 22.3.6 (LLVM 15.0.6)",
			SubgroupSizeControl: true, FullSubgroups: true,
			Limits: limits(1<<27, 1<<27, 65536, 128, 32768, [3]uint32{65535, 65535, 65535}, [3]uint32{1024, 1024, 1024}, 1024,
				16, 16, 8, 8, 8),
		}),
	}
}
