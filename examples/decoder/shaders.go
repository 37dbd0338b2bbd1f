package main

import (
	"embed"
	"fmt"
)

// The kernels' SPIR-V, built from shaders/*.comp by tools/glslc.sh (which
// --check keeps fresh) and committed, so go build needs no compiler.
//
//go:embed shaders/*.spv
var spirv embed.FS

// Kernels are the host's own compute kernels: everything of the model but
// attention.
type Kernels struct {
	Embed   *Kernel // buffers: token (uint), table, x; push: width, rows
	RMSNorm *Kernel // buffers: x, weight, y; push: n, eps (float bits); one workgroup
	MatVec  *Kernel // buffers: W, x, y; push: rows, cols, accumulate
	RoPE    *Kernel // buffers: x (in place), cos/sin table; push: heads, width, pos
	SwiGLU  *Kernel // buffers: gate, up, out; push: n
}

// NewKernels makes the five kernels on h.
func (h *Host) NewKernels() (*Kernels, error) {
	var ks Kernels
	for _, k := range []struct {
		dst              **Kernel
		name             string
		buffers, pushLen int
	}{
		{&ks.Embed, "embed", 3, 2},
		{&ks.RMSNorm, "rmsnorm", 3, 2},
		{&ks.MatVec, "matvec", 3, 3},
		{&ks.RoPE, "rope", 2, 3},
		{&ks.SwiGLU, "swiglu", 3, 1},
	} {
		code, err := spirv.ReadFile("shaders/" + k.name + ".spv")
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.name, err)
		}
		if *k.dst, err = h.NewKernel(k.name, code, k.buffers, k.pushLen); err != nil {
			return nil, err
		}
	}
	return &ks, nil
}
