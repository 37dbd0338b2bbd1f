// Package nn runs attention layers on a vkattn device: PyTorch's
// nn.MultiheadAttention (MHA) and additive (Bahdanau) attention, forward
// and backward.
//
// A PyTorch nn.MultiheadAttention layer (batch first, eval mode) runs as
// one submission: the input projections, every head's attention read
// through strides out of the projection output, the output projection,
// and the head-averaged weights when asked (SEMANTICS.md §11):
//
//	w, err := weights.LoadMHA("layer.safetensors", d, 0, 0) // or .npz; kdim, vdim 0 = d
//	layer, err := nn.NewMHA(dev, w)                          // uploads the weights once
//	defer layer.Close()
//	x, err := dev.Upload([]int{B, T, d}, xData)              // (B,T,d) batch first, or (T,d)
//	out, err := layer.Forward(x, nil, nil, nn.MHAOptions{    // key, value nil: self-attention
//		Heads:       8,
//		KeyPadding:  &nn.KeyPadding{Padded: padded},     // (B,S), PyTorch's key_padding_mask
//		Attention:   vkattn.Options{Causal: vkattn.CausalTopLeft},
//		NeedWeights: true,                               // out.Weights (B,h,T,S), out.AvgWeights (B,T,S)
//	})
//	y, err := out.Out.Download()                             // (B,T,d)
//
// Cross-attention passes key and value tensors; MHA.Prepare records the
// layer for replays and MHA.Plan says what runs. Additive (Bahdanau)
// attention projects queries and keys once and scores the projections in
// the attention kernel, so masks and outputs mean what they mean for
// vkattn.Device.Attention (SEMANTICS.md §12):
//
//	w, err := weights.LoadAdditive("additive.npz", dq, dk) // W_q (dq,da), W_k (dk,da), b, w_a
//	add, err := nn.NewAdditive(dev, w)
//	out, err := add.Attention(q, k, v, vkattn.Options{KeyLengths: lens})
//
// MHA.Backward and Additive.Backward give a layer's gradients, its
// inputs' and every parameter's by name (SEMANTICS.md §10), as float32
// tensors on the device: the whole pass, the forward again, each head's
// attention backward and the dense layers' gradients, runs as one
// submission, and nothing comes back to the host until a gradient is
// downloaded (PrepareBackward records it for replays):
//
//	g, err := layer.Backward(x, nil, nil, dY, nn.MHAOptions{Heads: 8})
//	defer g.Close()
//	dW, err := g.Params["in_proj_weight"].Download()
//
// Layers are safe for concurrent use, and their device's Close frees
// them with everything else made on the device. Errors wrap the sentinel
// errors of package vkattn.
package nn
