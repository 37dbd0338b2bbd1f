package train

import (
	"math"
	"math/rand/v2"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/verify"
)

// SaturationRow is one d_k and scaling's measurement (vkattn
// saturation): means over the rows of the largest weight, the entropy,
// and the norms of the gradient reaching the scores and of dQ.
type SaturationRow struct {
	DK        int     `json:"d_k"`
	Scaled    bool    `json:"scaled"` // scores times 1/sqrt(d_k)
	MaxWeight float64 `json:"mean_max_weight"`
	Entropy   float64 `json:"mean_entropy"`
	ScoreGrad float64 `json:"mean_score_grad_norm"`
	QGrad     float64 `json:"mean_q_grad_norm"`
}

// Saturation measures the 1/sqrt(d_k) argument at one d_k, with the scale or
// without (SEMANTICS.md §10): standard-normal Q, K, V and dO, H=8 heads of
// L=S=128 positions, the weights and output from the device's forward,
// dQ from its backward, the gradient reaching the scores from the
// weights (P * (dO . v_j - dO . O)).
func Saturation(dev *vkattn.Device, dk int, scaled bool, seed uint64) (SaturationRow, error) {
	const H, L, DV = 8, 128, 64
	row := SaturationRow{DK: dk, Scaled: scaled}
	r := rand.New(rand.NewPCG(seed, uint64(dk)))
	randn := func(n int) []float32 { return random.Normal(r, n) }
	qd, kd, vd, dOd := randn(H*L*dk), randn(H*L*dk), randn(H*L*DV), randn(H*L*DV)
	opts := vkattn.Options{WantWeights: true}
	if !scaled {
		opts.Scale = vkattn.CustomScale(1)
	}
	qs, vs := [4]int{1, H, L, dk}, [4]int{1, H, L, DV}
	q, k := verify.Input{Shape: qs[:], Data: qd}, verify.Input{Shape: qs[:], Data: kd}
	v, dO := verify.Input{Shape: vs[:], Data: vd}, verify.Input{Shape: vs[:], Data: dOd}
	out, err := verify.RunCall(dev, q, k, &v, func(q, k, v *vkattn.Tensor) (*vkattn.Call, error) { return dev.Prepare(q, k, v, opts) }, nil)
	if err != nil {
		return row, err
	}
	w, o := out.Weights, out.O
	opts.WantWeights = false
	g, err := verify.AttentionGradients(dev, q, k, v, dO, [3][4]int{qs, qs, vs}, opts, false)
	if err != nil {
		return row, err
	}
	dq := g.Grads[0].Data // dQ, first of AttentionGradients' list
	rows := H * L
	for i := 0; i < rows; i++ {
		p := w[i*L : (i+1)*L]
		h := i / L
		do := dOd[i*DV : (i+1)*DV]
		top, ent, dd := 0.0, 0.0, 0.0
		for c := 0; c < DV; c++ {
			dd += float64(do[c]) * float64(o[i*DV+c])
		}
		ds2 := 0.0
		for j, pj := range p {
			pj := float64(pj)
			top = math.Max(top, pj)
			if pj > 0 {
				ent -= pj * math.Log(pj)
			}
			dp := 0.0
			for c := 0; c < DV; c++ {
				dp += float64(do[c]) * float64(vd[(h*L+j)*DV+c])
			}
			ds := pj * (dp - dd)
			ds2 += ds * ds
		}
		q2 := 0.0
		for _, x := range dq[i*dk : (i+1)*dk] {
			q2 += float64(x) * float64(x)
		}
		row.MaxWeight += top / float64(rows)
		row.Entropy += ent / float64(rows)
		row.ScoreGrad += math.Sqrt(ds2) / float64(rows)
		row.QGrad += math.Sqrt(q2) / float64(rows)
	}
	return row, nil
}
