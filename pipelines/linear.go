package pipelines

import (
	"encoding/binary"
	"fmt"

	"github.com/vkattn/vkattn/vk"
)

// LinearPlan is what the planner chose for a dense layer Y = X W^T + b.
type LinearPlan struct {
	Variant   string // SPIR-V variant (shaders/manifest.txt)
	Path      LoadPath
	Vec4      bool
	TileRows  int // rows of X per invocation (fixed by the shader)
	TileCols  int // outputs per invocation (fixed by the shader)
	WorkGroup int
	Grid      [3]uint32
	Why       string // why this load path
}

func (p LinearPlan) String() string {
	loads := "scalar loads"
	if p.Vec4 {
		loads = "vec4 loads"
	}
	return fmt.Sprintf("kernel %s (load path %s: %s; %s), %dx%d output tile per invocation, workgroup %d, grid %dx%d",
		p.Variant, p.Path, p.Why, loads, p.TileRows, p.TileCols, p.WorkGroup, p.Grid[0], p.Grid[1])
}

// LinearInput is what the planner needs to know about a dense layer.
type LinearInput struct {
	Rows, Outputs, Inputs int // M, N, K
	// Aligned: X and W offsets and row strides are multiples of 4 (and so
	// is Inputs), so rows can be read as vec4s.
	Aligned bool
	Force   LoadPath
	Tuning  *Tuning // nil: DefaultTuning; the path's workgroup size is used
}

// PlanLinear picks the dense-layer variant and grid for a device.
func PlanLinear(dev vk.PhysicalDevice, in LinearInput) (LinearPlan, error) {
	var p LinearPlan
	if in.Rows <= 0 || in.Outputs <= 0 || in.Inputs <= 0 {
		return p, limitf("dense layer of %d rows, %d outputs, %d inputs: all must be at least 1", in.Rows, in.Outputs, in.Inputs)
	}
	path, tuning, why, err := choosePath(dev, in.Force, in.Tuning)
	if err != nil {
		return p, err
	}
	p.Path, p.Why = path, why
	p.Vec4 = in.Aligned && (p.Path == StoragePath || dev.TexelRGBA32F)
	shape := "scalar"
	if p.Vec4 {
		shape = "vec4"
	}
	p.Variant = "linear_" + p.Path.String() + "_" + shape
	p.TileRows, p.TileCols = 4, 4
	p.WorkGroup = min(tuning.WorkGroup, int(dev.Limits.MaxWorkGroupSize[0]), int(dev.Limits.MaxWorkGroupInvocations))
	colTiles := (in.Outputs + p.TileCols - 1) / p.TileCols
	p.Grid = [3]uint32{uint32((colTiles + p.WorkGroup - 1) / p.WorkGroup), uint32((in.Rows + p.TileRows - 1) / p.TileRows), 1}
	for i, what := range []string{"output tile blocks", "row tiles"} {
		if p.Grid[i] > dev.Limits.MaxWorkGroupCount[i] {
			return p, limitf("%d %s exceed the device's %d workgroups on axis %d", p.Grid[i], what, dev.Limits.MaxWorkGroupCount[i], i)
		}
	}
	return p, nil
}

// Rows is a matrix of row vectors in a buffer: row r starts at element
// Offset + r*Stride and is contiguous.
type Rows struct {
	Buffer *vk.Buffer
	Offset int
	Stride int
}

// LinearArgs is one dense layer Y = X W^T + b in kernel terms: X is
// (Rows, Inputs), W (Outputs, Inputs) in PyTorch's (out, in) layout, Y
// (Rows, Outputs), Bias Outputs floats from element BiasOffset (nil: none).
type LinearArgs struct {
	Rows, Outputs, Inputs int
	X, W, Y               Rows
	Bias                  *vk.Buffer
	BiasOffset            int
}

const linearFlagBias = 1

// Linear binds a dense layer.
func (ks *Kernels) Linear(p LinearPlan, x LinearArgs) (*Step, error) {
	info := ks.dev.Info
	texel := p.Path == TexelPath
	for _, c := range []struct {
		what  string
		buf   *vk.Buffer
		texel bool
	}{{"X", x.X.Buffer, texel}, {"W", x.W.Buffer, texel}, {"Y", x.Y.Buffer, false}, {"bias", x.Bias, false}} {
		if err := checkRange(info, c.what, c.buf, c.texel, p.Vec4 && c.texel); err != nil {
			return nil, err
		}
	}
	in := vk.StorageBuffer
	if texel {
		in = vk.UniformTexelR32F
		if p.Vec4 {
			in = vk.UniformTexelRGBA32F
		}
	}
	k, err := ks.get(vk.KernelSpec{
		Name:     fmt.Sprintf("%s/w%d", p.Variant, p.WorkGroup),
		Bindings: []vk.BindingType{vk.UniformBuffer, in, in, vk.StorageBuffer, vk.StorageBuffer},
		Spec:     []int32{int32(p.WorkGroup)},
	}, p.Variant)
	if err != nil {
		return nil, err
	}
	st := &Step{}
	params, err := ks.dev.NewBuffer(64)
	if err != nil {
		return nil, err
	}
	st.own(params)
	flags := 0
	if x.Bias != nil {
		flags |= linearFlagBias
	}
	ints := []int{
		x.Rows, x.Outputs, x.Inputs, flags,
		x.X.Offset, x.X.Stride, 0, 0,
		x.W.Offset, x.W.Stride, 0, 0,
		x.Y.Offset, x.Y.Stride, x.BiasOffset, 0,
	}
	if err := params.Write(0, int32Bytes(ints)); err != nil {
		st.Close()
		return nil, err
	}
	set, err := ks.bind(k, params, x.X.Buffer, x.W.Buffer, x.Bias, x.Y.Buffer)
	if err != nil {
		st.Close()
		return nil, err
	}
	st.own(set)
	st.dispatches = []dispatch{{kernel: k, set: set, groups: p.Grid}}
	return st, nil
}

// HeadMean binds the mean over heads of attention weights (B, H, n) into
// (B, n).
func (ks *Kernels) HeadMean(weights, mean *vk.Buffer, b, h, n int) (*Step, error) {
	if err := checkRange(ks.dev.Info, "weights", weights, false, false); err != nil {
		return nil, err
	}
	k, err := ks.get(vk.KernelSpec{
		Name:     "head_mean",
		Bindings: []vk.BindingType{vk.StorageBuffer, vk.StorageBuffer},
		PushSize: 12,
	}, "head_mean")
	if err != nil {
		return nil, err
	}
	set, err := ks.bind(k, weights, mean)
	if err != nil {
		return nil, err
	}
	groups := (b*n + 63) / 64
	if groups > int(ks.dev.Info.Limits.MaxWorkGroupCount[0]) {
		set.Close()
		return nil, limitf("%d averaged weights need %d workgroups, the device allows %d", b*n, groups, ks.dev.Info.Limits.MaxWorkGroupCount[0])
	}
	st := &Step{owned: []closer{set}}
	st.dispatches = []dispatch{{kernel: k, set: set, groups: [3]uint32{uint32(groups), 1, 1}, push: int32Bytes([]int{b, h, n})}}
	return st, nil
}

// int32Bytes encodes ints as little-endian int32s (std140 ivec4 rows when
// the count is a multiple of 4).
func int32Bytes(ints []int) []byte {
	out := make([]byte, 4*len(ints))
	for i, v := range ints {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(v)))
	}
	return out
}
