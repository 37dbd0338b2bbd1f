package core

import (
	"fmt"
	"strings"
)

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
