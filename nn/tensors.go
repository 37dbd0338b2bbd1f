package nn

import (
	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/engine"
)

// The root's Tensor and Device are named types over the engine's: the
// layers record with the engine's and hand the root's to their callers.

func engineTensors(ts ...*vkattn.Tensor) []*engine.Tensor {
	out := make([]*engine.Tensor, len(ts))
	for i, t := range ts {
		out[i] = (*engine.Tensor)(t)
	}
	return out
}

func closeTensors(ts ...*vkattn.Tensor) {
	for _, t := range ts {
		t.Close()
	}
}

// errNoLayer refuses the methods of a nil layer.
var errNoLayer = core.Errorf(vkattn.ErrClosed, "no layer: the *MHA or *Additive is nil")
