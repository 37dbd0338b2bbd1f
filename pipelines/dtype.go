package pipelines

import (
	"fmt"
	"strings"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/vk"
)

// DType is the element type a tensor is stored in (package core). Kernels
// widen every element to float32 as they load it and compute in float32;
// outputs are float32.
type DType = core.DType

const (
	Float32  = core.Float32
	Float16  = core.Float16
	BFloat16 = core.BFloat16
	Q8_0     = core.Q8_0
)

// DTypes is every element type, in order.
var DTypes = []DType{Float32, Float16, BFloat16}

// typeSpec is t as loads.glsl's TYPE_* specialization constants.
func typeSpec(t DType) int32 { return int32(t) }

// texelBinding is the view a kernel reads an input of type t through on
// the texel path: raw words, widened by the shader.
// q8_0 is read as words too: four quants a word, the scales two a word.
func texelBinding(t DType, vec4 bool) vk.BindingType {
	words := t == Float32 || t == Q8_0
	switch {
	case words && vec4:
		return vk.UniformTexelRGBA32UI
	case words:
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
// Q, K and V each in any of DTypes, K and V in q8_0 too (rows of whole
// blocks), outputs in float32.
func (s *AttentionShape) checkTypes() error {
	for _, in := range []struct {
		what string
		t    DType
		kv   bool
		w    int
	}{{"Q", s.Q.Type, false, s.DK}, {"K", s.K.Type, true, s.DK}, {"V", s.V.Type, true, s.DV}} {
		if !in.t.Valid() && !(in.kv && in.t == Q8_0) {
			return fmt.Errorf("attention: %s has element type %v; the kernel reads %v (and q8_0 for K and V)", in.what, in.t, DTypes)
		}
		if in.t == Q8_0 && in.w%core.Q8Block != 0 {
			return fmt.Errorf("attention: %s in q8_0 has rows of %d elements; q8_0 rows are whole blocks of %d", in.what, in.w, core.Q8Block)
		}
	}
	if s.O.Type != Float32 {
		return fmt.Errorf("attention: output of element type %v; outputs are f32", s.O.Type)
	}
	return nil
}
