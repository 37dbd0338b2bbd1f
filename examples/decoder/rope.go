package main

import "math"

// ropeTable is the cosines and sines the RoPE kernel reads: for each
// position p < positions and pair i < width/2, the angle
// p * theta^(-2i/width) as {cos, sin}, computed in float64 and rounded
// once to float32.
func ropeTable(positions, width int, theta float64) []float32 {
	half := width / 2
	t := make([]float32, 2*positions*half)
	for p := range positions {
		for i := range half {
			a := float64(p) * math.Pow(theta, -2*float64(i)/float64(width))
			t[2*(p*half+i)] = float32(math.Cos(a))
			t[2*(p*half+i)+1] = float32(math.Sin(a))
		}
	}
	return t
}
