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

// QKV are the inputs of one attention call, drawn with draw (Uniform or
// Normal) in the order Q, K, V: Q of shape (B, H, L, d_k), K (B, H_kv, S,
// d_k) and V (B, H_kv, S, d_v), dense. shapes are theirs.
func QKV(r Source, draw func(Source, int) []float32, b, h, hkv, l, s, dk, dv int) (in [3][]float32, shapes [3][4]int) {
	shapes = [3][4]int{{b, h, l, dk}, {b, hkv, s, dk}, {b, hkv, s, dv}}
	for i, sh := range shapes {
		in[i] = draw(r, sh[0]*sh[1]*sh[2]*sh[3])
	}
	return in, shapes
}
