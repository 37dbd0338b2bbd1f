package vkattn

import "github.com/vkattn/vkattn/core"

// The layers' parameters and options (package core).
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
)
