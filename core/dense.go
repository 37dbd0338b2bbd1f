package core

// Dense layers in float64, as PyTorch lays them out, shared by the
// reference and the host side of the layers' backward passes.

// Linear returns x W^T + b for x (rows, in) and W (out, in), PyTorch's
// layout; b (out) may be nil.
func Linear(x []float64, rows, in int, w, b []float32, out int) []float64 {
	y := make([]float64, rows*out)
	for r := 0; r < rows; r++ {
		xr := x[r*in : (r+1)*in]
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = float64(b[o])
			}
			for i, wv := range w[o*in : (o+1)*in] {
				s += xr[i] * float64(wv)
			}
			y[r*out+o] = s
		}
	}
	return y
}

// LinearBackward is the backward of y = x W^T + b for x (rows, in), W
// (out, in) and the gradient dy (rows, out): dW = dy^T x, db = the column
// sums of dy (nil without a bias), dx = dy W.
func LinearBackward(dy, x []float64, rows, in, out int, w []float32, bias bool) (dW, db, dx []float64) {
	dW, dx = make([]float64, out*in), make([]float64, rows*in)
	if bias {
		db = make([]float64, out)
	}
	for r := 0; r < rows; r++ {
		xr, dxr := x[r*in:(r+1)*in], dx[r*in:(r+1)*in]
		for o := 0; o < out; o++ {
			g := dy[r*out+o]
			if g == 0 {
				continue
			}
			if bias {
				db[o] += g
			}
			wo, dWo := w[o*in:(o+1)*in], dW[o*in:(o+1)*in]
			for i := range xr {
				dWo[i] += g * xr[i]
				dxr[i] += g * float64(wo[i])
			}
		}
	}
	return dW, db, dx
}

// SwapAxes12 returns dense (n0, n1, n2, w) data rearranged as (n0, n2,
// n1, w): (B, T, heads, d) to (B, heads, T, d) and back.
func SwapAxes12[E any](x []E, n0, n1, n2, w int) []E {
	y := make([]E, len(x))
	for a := 0; a < n0; a++ {
		for i := 0; i < n1; i++ {
			for j := 0; j < n2; j++ {
				src, dst := ((a*n1+i)*n2+j)*w, ((a*n2+j)*n1+i)*w
				copy(y[dst:dst+w], x[src:src+w])
			}
		}
	}
	return y
}

// Project returns x W + b for x (rows, in) and W (in, out), the layout of
// additive attention's W_q and W_k; b (out) may be nil. It is Linear of
// W's transpose, summed in the same order.
func Project(x []float64, rows, in int, w, b []float32, out int) []float64 {
	return Linear(x, rows, in, Transpose(w, in, out), b, out)
}

// ProjectBackward is the backward of y = x W + b for x (rows, in), W
// (in, out) and dy (rows, out): dW = x^T dy, db = the column sums of dy
// (nil without a bias), dx = dy W^T; LinearBackward of W's transpose.
func ProjectBackward(dy, x []float64, rows, in, out int, w []float32, bias bool) (dW, db, dx []float64) {
	dWt, db, dx := LinearBackward(dy, x, rows, in, out, Transpose(w, in, out), bias)
	return Transpose(dWt, out, in), db, dx
}

// Transpose returns the (cols, rows) transpose of a row-major (rows, cols)
// matrix.
func Transpose[E any](x []E, rows, cols int) []E {
	y := make([]E, len(x))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			y[c*rows+r] = x[r*cols+c]
		}
	}
	return y
}
