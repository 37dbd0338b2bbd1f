package harness

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/tune"
)

// CascadeSuite is the shape of `vkattn bench --suite cascade`: Sequences
// sequences of Rows query rows each share a Prefix-token prefix, and each
// has Suffix tokens of its own.
type CascadeSuite struct {
	Prefix    int `json:"prefix"`
	Suffix    int `json:"suffix"`
	Sequences int `json:"sequences"`
	Rows      int `json:"rows"` // query rows of each sequence
	H         int `json:"h"`
	HKV       int `json:"h_kv"`
	D         int `json:"d"`
}

// DefaultCascadeSuite is bench's: 8 sequences over a 4,096-token prefix.
var DefaultCascadeSuite = CascadeSuite{Prefix: 4096, Suffix: 256, Sequences: 8, Rows: 4, H: 8, HKV: 2, D: 64}

// CascadeResult compares cascade inference with attending each sequence
// in full (SEMANTICS.md §7.1).
type CascadeResult struct {
	CascadeSuite
	// CascadeNS: the prefix attended once by every sequence's rows, the
	// suffixes (one call, each row masked to its own sequence's suffix,
	// causal), and the merge; MergeNS the merge alone; FullNS a call per
	// sequence over its prefix and suffix, causal. Medians of the reps.
	CascadeNS int64   `json:"cascade_median_ns"`
	MergeNS   int64   `json:"merge_median_ns"`
	FullNS    int64   `json:"full_median_ns"`
	Speedup   float64 `json:"speedup"` // FullNS / CascadeNS
}

// Cascade measures cs's cascade against its full attentions, reps times
// each, alternating.
func (cs CascadeSuite) Cascade(ctx context.Context, dev *vkattn.Device, reps int, seed uint64, clock *tune.Clock, tick func()) ([]CascadeResult, error) {
	tick = tickOf(tick)
	randn := normals(rand.New(rand.NewPCG(seed, 0x63617363))) // "casc"
	n, rows, total := cs.Sequences, cs.Sequences*cs.Rows, cs.Sequences*cs.Suffix
	var closers []interface{ Close() }
	defer func() {
		clock.Idle()
		CloseAfter(ctx, func() {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i].Close()
			}
		})
	}()
	upload := func(shape []int, x []float32) (*vkattn.Tensor, error) {
		t, err := dev.Upload(shape, x)
		if err == nil {
			closers = append(closers, t)
		}
		return t, err
	}
	prepare := func(q, k, v *vkattn.Tensor, opts vkattn.Options) (*vkattn.Call, error) {
		c, err := dev.Prepare(q, k, v, opts)
		if err == nil {
			closers = append(closers, c)
		}
		return c, err
	}
	kv := func(s int) []int { return []int{1, cs.HKV, s, cs.D} }
	q, err := upload([]int{1, cs.H, rows, cs.D}, randn(cs.H*rows*cs.D))
	if err != nil {
		return nil, err
	}
	pk, pv := randn(cs.HKV*cs.Prefix*cs.D), randn(cs.HKV*cs.Prefix*cs.D)
	sk, sv := randn(cs.HKV*total*cs.D), randn(cs.HKV*total*cs.D)
	// The cascade: the prefix once, the suffixes in one call.
	pkt, err := upload(kv(cs.Prefix), pk)
	if err != nil {
		return nil, err
	}
	pvt, err := upload(kv(cs.Prefix), pv)
	if err != nil {
		return nil, err
	}
	prefix, err := prepare(q, pkt, pvt, vkattn.Options{WantLSE: true})
	if err != nil {
		return nil, err
	}
	own := cs.ownSuffixes()
	skt, err := upload(kv(total), sk)
	if err != nil {
		return nil, err
	}
	svt, err := upload(kv(total), sv)
	if err != nil {
		return nil, err
	}
	suffix, err := prepare(q, skt, svt, vkattn.Options{WantLSE: true, BoolMasks: []vkattn.BoolMask{own}})
	if err != nil {
		return nil, err
	}
	merge, err := dev.PrepareMerge([]vkattn.Part{prefix.Output().Part(), suffix.Output().Part()})
	if err != nil {
		return nil, err
	}
	closers = append(closers, merge)
	// Each sequence in full: its rows over its prefix and suffix.
	full := make([]*vkattn.Call, n)
	for i := range full {
		qi, err := upload([]int{1, cs.H, cs.Rows, cs.D}, randn(cs.H*cs.Rows*cs.D))
		if err != nil {
			return nil, err
		}
		ki, err := upload(kv(cs.Prefix+cs.Suffix), randn(cs.HKV*(cs.Prefix+cs.Suffix)*cs.D))
		if err != nil {
			return nil, err
		}
		vi, err := upload(kv(cs.Prefix+cs.Suffix), randn(cs.HKV*(cs.Prefix+cs.Suffix)*cs.D))
		if err != nil {
			return nil, err
		}
		if full[i], err = prepare(qi, ki, vi, vkattn.Options{Causal: vkattn.CausalBottomRight}); err != nil {
			return nil, err
		}
	}
	run := func(calls ...*vkattn.Call) (time.Duration, error) { return runCalls(ctx, calls) }
	var cascade, merges, fulls []time.Duration
	for i := 0; i < reps; i++ {
		clock.Begin(i == 0)
		t, err := run(prefix, suffix, merge)
		if err != nil {
			return nil, err
		}
		m, err := run(merge)
		if err != nil {
			return nil, err
		}
		f, err := run(full...)
		if err != nil {
			return nil, err
		}
		clock.Done()
		cascade, merges, fulls = append(cascade, t), append(merges, m), append(fulls, f)
		tick()
	}
	res := CascadeResult{CascadeSuite: cs, CascadeNS: tune.StatsOf(cascade).Median, MergeNS: tune.StatsOf(merges).Median, FullNS: tune.StatsOf(fulls).Median}
	res.Speedup = float64(res.FullNS) / float64(res.CascadeNS)
	return []CascadeResult{res}, nil
}

// ownSuffixes is the mask of the suffixes' call: each sequence's rows see
// their own suffix, causally (bottom-right), and no other.
func (cs CascadeSuite) ownSuffixes() vkattn.BoolMask {
	rows, total := cs.Sequences*cs.Rows, cs.Sequences*cs.Suffix
	own := vkattn.BoolMask{Shape: vkattn.MaskShape{1, 1, rows, total}, Values: make([]bool, rows*total), Meaning: vkattn.TrueAllows}
	for i := 0; i < cs.Sequences; i++ {
		for t := 0; t < cs.Rows; t++ {
			for j := 0; j < cs.Suffix; j++ {
				own.Values[(i*cs.Rows+t)*total+i*cs.Suffix+j] = j <= t+cs.Suffix-cs.Rows
			}
		}
	}
	return own
}

// runCalls runs calls one after another and returns the wall time.
func runCalls(ctx context.Context, calls []*vkattn.Call) (time.Duration, error) {
	t0 := time.Now()
	for _, c := range calls {
		if _, err := c.Run(ctx); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}
