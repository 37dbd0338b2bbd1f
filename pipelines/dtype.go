package pipelines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vkattn/vkattn/core"
)

// DTypes is every element type, in order.
var DTypes = []core.DType{core.Float32, core.Float16, core.BFloat16}

// typeSpec is t as loads.glsl's TYPE_* specialization constants.
func typeSpec(t core.DType) int32 { return int32(t) }

// texelBinding is the view a kernel reads an input of type t through on
// the texel path: raw words, widened by the shader.
// Quantized types are read as words too: four or eight quants a word, the
// scales two a word.
func texelBinding(t core.DType, vec4 bool) core.BindingType {
	words := t == core.Float32 || t.Quantized()
	switch {
	case words && vec4:
		return core.UniformTexelRGBA32UI
	case words:
		return core.UniformTexelR32UI
	case vec4:
		return core.UniformTexelRGBA16UI
	}
	return core.UniformTexelR16UI
}

// typesNote says how inputs named names of types ts are read: nothing when
// all are float32.
func typesNote(names []string, ts ...core.DType) string {
	if !slices.ContainsFunc(ts, func(t core.DType) bool { return t != core.Float32 }) {
		return ""
	}
	return fmt.Sprintf(", %s widened to f32 on load", namedTypes(names, ts...))
}

// namedTypes is "Q f16 K f16 V bf16": each input's name and type.
func namedTypes(names []string, ts ...core.DType) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = names[i] + " " + t.String()
	}
	return strings.Join(parts, " ")
}

// checkTypes refuses element types the attention kernel cannot read:
// Q, K and V each in any of DTypes, K and V in core.QuantTypes too (rows of
// whole blocks), outputs in float32.
func (s *AttentionShape) checkTypes() error {
	for _, in := range []struct {
		what string
		t    core.DType
		kv   bool
		w    int
	}{{"Q", s.Q.Type, false, s.DK}, {"K", s.K.Type, true, s.DK}, {"V", s.V.Type, true, s.DV}} {
		if !in.t.Valid() && !(in.kv && in.t.Quantized()) {
			return fmt.Errorf("attention: %s has element type %v; the kernel reads %v (and %s for K and V)", in.what, in.t, DTypes, strings.Join(core.QuantNames(), ", "))
		}
		if in.t.Quantized() && in.w%quantBlock(in.t) != 0 {
			return fmt.Errorf("attention: %s in %v has rows of %d elements; %v rows are whole blocks of %d", in.what, in.t, in.w, in.t, quantBlock(in.t))
		}
	}
	if s.O.Type != core.Float32 {
		return fmt.Errorf("attention: output of element type %v; outputs are f32", s.O.Type)
	}
	return nil
}

// quantBlock is the elements of one block of the quantized type t.
func quantBlock(t core.DType) int {
	q, _ := t.Quant()
	return q.Block
}
