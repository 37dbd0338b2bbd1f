package vkattn

import "github.com/vkattn/vkattn/internal/engine"

type (
	KVCache           = engine.KVCache
	KVCacheConfig     = engine.KVCacheConfig
	DecodeStep        = engine.DecodeStep
	MHA               = engine.MHA
	MHACall           = engine.MHACall
	MHAOutput         = engine.MHAOutput
	MHAPlan           = engine.MHAPlan
	MHAGradients      = engine.MHAGradients
	Additive          = engine.Additive
	AdditiveGradients = engine.AdditiveGradients
	LayerPlan         = engine.LayerPlan
	LinearKernelPlan  = engine.LinearKernelPlan
)
