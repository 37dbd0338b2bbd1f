package nn

import (
	"github.com/vkattn/vkattn/core"
)

// The layers' parameters and options (package core, shared with the
// float64 reference and the weights readers; package core documents each
// in full), and their plans.
type (
	// MHAWeights are the parameters of one PyTorch nn.MultiheadAttention
	// layer in PyTorch's own layout.
	MHAWeights = core.MHAWeights
	// KeyPadding is PyTorch's boolean key_padding_mask.
	KeyPadding = core.KeyPadding
	// MHAOptions are the options of one MHA call.
	MHAOptions = core.MHAOptions
	// AdditiveWeights are the parameters of additive (Bahdanau) attention.
	AdditiveWeights = core.AdditiveWeights
	// LayerPlan is one dense layer of a layer's plan: an MHA projection,
	// or additive attention's (engine.Plan.Projections).
	LayerPlan = core.LayerPlan
	// LinearKernelPlan is the dense-layer kernel (Y = X W^T + b) the
	// planner chose for a LayerPlan.
	LinearKernelPlan = core.LinearKernelPlan
)
