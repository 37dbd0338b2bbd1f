// Package random makes the random inputs of vkattn's checks, benchmarks
// and tests: one function for each distribution they draw from.
package random

// Source is what the generators of math/rand and math/rand/v2 both
// provide.
type Source interface {
	Float32() float32
	NormFloat64() float64
}

// Uniform are n values uniform in [-1, 1).
func Uniform(r Source, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*r.Float32() - 1
	}
	return x
}

// Normal are n standard normal values.
func Normal(r Source, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}
