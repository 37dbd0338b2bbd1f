package vkattn_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/devtest"
	"github.com/vkattn/vkattn/kv"
	"github.com/vkattn/vkattn/nn"
)

// callEvery calls every exported method of the nil pointer of recv's type
// with zero arguments (a context.Background for a context) and reports
// the methods that panicked, or returned an error wrapping no sentinel.
func callEvery(t *testing.T, recv any) {
	t.Helper()
	v := reflect.ValueOf(recv)
	ctxType := reflect.TypeFor[context.Context]()
	errType := reflect.TypeFor[error]()
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		name := fmt.Sprintf("(%v).%s", v.Type(), m.Name)
		args := make([]reflect.Value, m.Type.NumIn()-1)
		for j := range args {
			in := m.Type.In(j + 1)
			if in == ctxType {
				args[j] = reflect.ValueOf(context.Background())
			} else {
				args[j] = reflect.Zero(in)
			}
		}
		if m.Type.IsVariadic() {
			args = args[:len(args)-1]
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", name, r)
				}
			}()
			out := v.Method(i).Call(args)
			for _, o := range out {
				if o.Type() != errType || o.IsNil() {
					continue
				}
				err := o.Interface().(error)
				if !wrapsOne(err) {
					t.Errorf("%s: %v wraps no sentinel", name, err)
				}
			}
		}()
	}
}

func wrapsOne(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// TestNilReceivers: no method of a nil device, tensor, call, output, KV
// cache, decode step or layer panics; each refusal wraps a sentinel
// (SEMANTICS.md §9.4: nothing panics on bad input).
func TestNilReceivers(t *testing.T) {
	for _, recv := range []any{(*vkattn.Device)(nil), (*vkattn.Tensor)(nil), (*vkattn.Call)(nil), (*vkattn.Output)(nil),
		(*vkattn.Gradients)(nil), (*kv.Cache)(nil), (*kv.DecodeStep)(nil), (*nn.MHA)(nil), (*nn.Additive)(nil),
		(*nn.MHACall)(nil), (*nn.MHAGradCall)(nil), (*nn.AdditiveGradCall)(nil), (*nn.MHAOutput)(nil)} {
		callEvery(t, recv)
	}
	if _, err := kv.New(nil, kv.Config{B: 1, HKV: 1, Capacity: 16, DK: 8, DV: 8}); !wrapsOne(err) {
		t.Errorf("kv.New(nil, ...): %v", err)
	}
	for _, f := range []func() error{
		func() error { _, err := nn.NewMHA(nil, &nn.MHAWeights{}); return err },
		func() error { _, err := nn.NewAdditive(nil, &nn.AdditiveWeights{}); return err },
		func() error { _, err := nn.NewMHA(devtest.Dev, nil); return err },
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("a layer of a nil device or weights panicked: %v", r)
				}
			}()
			if err := f(); !wrapsOne(err) {
				t.Errorf("a layer of a nil device or weights: %v", err)
			}
		}()
	}
}
