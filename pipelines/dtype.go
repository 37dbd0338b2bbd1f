package pipelines

import (
	"fmt"
	"strings"

	"github.com/vkattn/vkattn/vk"
)

// DType is the element type a tensor is stored in. Kernels widen every
// element to float32 as they load it and compute in float32; outputs are
// float32.
type DType int

const (
	Float32  DType = iota // IEEE binary32
	Float16               // IEEE binary16
	BFloat16              // the upper 16 bits of a binary32
)

// DTypes is every element type, in order.
var DTypes = []DType{Float32, Float16, BFloat16}

func (t DType) String() string {
	switch t {
	case Float32:
		return "f32"
	case Float16:
		return "f16"
	case BFloat16:
		return "bf16"
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// Bytes is the size of one element.
func (t DType) Bytes() int {
	if t == Float32 {
		return 4
	}
	return 2
}

// Valid reports whether t is one of DTypes.
func (t DType) Valid() bool { return t >= Float32 && t <= BFloat16 }

// spec is t as loads.glsl's TYPE_* specialization constants.
func (t DType) spec() int32 { return int32(t) }

// texelBinding is the view a kernel reads an input of type t through on
// the texel path: raw words, widened by the shader.
func (t DType) texelBinding(vec4 bool) vk.BindingType {
	switch {
	case t == Float32 && vec4:
		return vk.UniformTexelRGBA32UI
	case t == Float32:
		return vk.UniformTexelR32UI
	case vec4:
		return vk.UniformTexelRGBA16UI
	}
	return vk.UniformTexelR16UI
}

// typesNote says how inputs named names of types ts are read: nothing when
// all are float32.
func typesNote(names []string, ts ...DType) string {
	var parts []string
	half := false
	for i, t := range ts {
		parts = append(parts, names[i]+" "+t.String())
		half = half || t != Float32
	}
	if !half {
		return ""
	}
	return fmt.Sprintf(", %s widened to f32 on load", strings.Join(parts, " "))
}

// checkTypes refuses element types the attention kernel cannot read:
// Q, K and V each in any of DTypes, outputs in float32.
func (s *AttentionShape) checkTypes() error {
	for _, in := range []struct {
		what string
		t    DType
	}{{"Q", s.Q.Type}, {"K", s.K.Type}, {"V", s.V.Type}} {
		if !in.t.Valid() {
			return fmt.Errorf("attention: %s has element type %v; the kernel reads %v", in.what, in.t, DTypes)
		}
	}
	if s.O.Type != Float32 {
		return fmt.Errorf("attention: output of element type %v; outputs are f32", s.O.Type)
	}
	return nil
}
