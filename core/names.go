package core

import (
	"fmt"
	"strings"
)

// The enumerated types' tables of names, with the String and Parse
// functions they serve.

var causalNames = names[Causal]{"Causal", "causal alignment", []string{"none", "top-left", "bottom-right"}}

func (c Causal) String() string { return causalNames.of(c) }

// ParseCausal reads the names String prints ("none", "top-left", "bottom-right").
func ParseCausal(s string) (Causal, error) { return causalNames.parse(s) }

var meaningNames = names[MaskMeaning]{"MaskMeaning", "mask meaning", []string{"unset", "true-allows", "true-blocks"}}

func (m MaskMeaning) String() string { return meaningNames.of(m) }

var loadPathNames = names[LoadPath]{"LoadPath", "load path", []string{"auto", "texel", "storage"}}

func (p LoadPath) String() string { return loadPathNames.of(p) }

// ParseLoadPath reads a name String prints: auto, texel or storage; another
// is an error wrapping ErrOption.
func ParseLoadPath(s string) (LoadPath, error) { return loadPathNames.parse(s) }

var ropeStyleNames = names[RoPEStyle]{"RoPEStyle", "RoPE style", []string{"half", "interleaved"}}

func (s RoPEStyle) String() string { return ropeStyleNames.of(s) }

// ParseRoPEStyle reads the names String prints ("half", "interleaved").
func ParseRoPEStyle(s string) (RoPEStyle, error) { return ropeStyleNames.parse(s) }

var deviceTypeNames = names[DeviceType]{"DeviceType", "device type", []string{"other", "integrated-gpu", "discrete-gpu", "virtual-gpu", "cpu"}}

func (t DeviceType) String() string { return deviceTypeNames.of(t) }

var dtypeNames = names[DType]{"DType", "element type", dtypeNameList()}

// dtypeNameList is the float types' names, then QuantTypes' by value.
func dtypeNameList() []string {
	list := []string{"f32", "f16", "bf16"}
	for _, q := range QuantTypes {
		for len(list) <= int(q.DType) {
			list = append(list, "")
		}
		list[q.DType] = q.Name
	}
	return list
}

func (t DType) String() string { return dtypeNames.of(t) }

// MarshalText writes the type's name, so plans print as readable JSON;
// UnmarshalText reads it back.
func (t DType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

func (t *DType) UnmarshalText(b []byte) (err error) {
	*t, err = ParseDType(string(b))
	return err
}

var matrixScopeNames = names[MatrixScope]{"MatrixScope", "matrix scope", []string{"", "device", "workgroup", "subgroup", "", "queue family"}}

func (s MatrixScope) String() string { return matrixScopeNames.of(s) }

// names are the printed names of an enumerated type's values, indexed by
// value: one table serves its String and its Parse function.
type names[T ~int | ~uint32] struct {
	typ  string   // the Go type's name, for values outside the table
	what string   // what a value is, for Parse's errors
	list []string // list[v] names value v; "" names none
}

// of is v's name, or TYPE(v) for a value outside the table.
func (n names[T]) of(v T) string {
	if int64(v) >= 0 && int64(v) < int64(len(n.list)) && n.list[v] != "" {
		return n.list[v]
	}
	return fmt.Sprintf("%s(%d)", n.typ, int(v))
}

// parse reads a name of the table; another is an error wrapping ErrOption
// that lists the names.
func (n names[T]) parse(s string) (T, error) {
	var want []string
	for i, name := range n.list {
		if name == "" {
			continue
		}
		if name == s {
			return T(i), nil
		}
		want = append(want, name)
	}
	return 0, Errorf(ErrOption, "unknown %s %q (want %s)", n.what, s, orList(want))
}

// orList joins names as "a, b or c".
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}
