package tune

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/random"
	"github.com/vkattn/vkattn/internal/stats"
)

// Inputs are the Q, K and V of one timed problem.
type Inputs struct{ Q, K, V *vkattn.Tensor }

// Close frees the tensors that exist.
func (in Inputs) Close() {
	for _, t := range []*vkattn.Tensor{in.Q, in.K, in.V} {
		if t != nil {
			t.Close()
		}
	}
}

// UploadRandom uploads Q (B,H,L,d_k), K (B,H_kv,S,d_k) and V (B,H_kv,S,d_v)
// of d, filled in that order with values uniform in [-1, 1) from r. On an
// error nothing stays uploaded.
func UploadRandom(dev *vkattn.Device, r *rand.Rand, d vkattn.Dims) (Inputs, error) {
	return UploadRandomAs(dev, r, d, [3]vkattn.DType{})
}

// UploadRandomAs is UploadRandom with Q, K and V stored as the element
// types types (the random values rounded to them).
func UploadRandomAs(dev *vkattn.Device, r *rand.Rand, d vkattn.Dims, types [3]vkattn.DType) (Inputs, error) {
	q, k, v := [4]int{d.B, d.H, d.L, d.DK}, [4]int{d.B, d.HKV, d.S, d.DK}, [4]int{d.B, d.HKV, d.S, d.DV}
	if _, err := vkattn.CheckProblem(q, k, v, nil); err != nil {
		return Inputs{}, err
	}
	var in Inputs
	for i, u := range []struct {
		dst   **vkattn.Tensor
		shape [4]int
	}{{&in.Q, q}, {&in.K, k}, {&in.V, v}} {
		// CheckProblem only keeps the count from wrapping; a failed Go
		// allocation aborts the program, so the host copy is bounded here.
		n := u.shape[0] * u.shape[1] * u.shape[2] * u.shape[3]
		if n > maxRandom {
			in.Close()
			return Inputs{}, fmt.Errorf("%w: %v is %d values, more than the %d filled with random data on the host", vkattn.ErrTooLarge, u.shape, n, maxRandom)
		}
		t, err := dev.UploadAs(u.shape[:], random.Uniform(r, n), types[i])
		if err != nil {
			in.Close()
			return Inputs{}, fmt.Errorf("upload: %w", err)
		}
		*u.dst = t
	}
	return in, nil
}

// maxRandom is the most values UploadRandom makes for one tensor (8 GiB).
const maxRandom = 1 << 31

// Stats are the min, median and max of a set of times, in nanoseconds.
type Stats struct {
	Min    int64 `json:"min"`
	Median int64 `json:"median"`
	Max    int64 `json:"max"`
}

// StatsOf summarises ts (at least one time); the median of an even count
// is the mean of the middle two.
func StatsOf(ts []time.Duration) Stats {
	s := stats.Of(ts)
	return Stats{Min: int64(s.Min), Median: int64(s.Median), Max: int64(s.Max)}
}

// Timing is reps timed runs of a prepared call.
type Timing struct {
	GPU  Stats // zero when a run had no device timestamps
	Wall Stats // submit and wait
	// Timing says which Median is: "gpu", or "wall" where the device gave
	// no GPU time for some run.
	Timing string
	Median time.Duration
}

// Runner is what TimeRuns times: a prepared call, or anything that runs
// on the device and says for how long (0 without timestamps).
type Runner interface {
	Run(context.Context) (time.Duration, error)
}

// TimeRuns runs call reps times (at least 1), calling tick after each run.
func TimeRuns(ctx context.Context, call Runner, reps int, tick func()) (Timing, error) {
	if reps < 1 {
		return Timing{}, fmt.Errorf("tune: %d timed runs: want at least 1", reps)
	}
	gpu := make([]time.Duration, reps)
	wall := make([]time.Duration, reps)
	for i := range reps {
		start := time.Now()
		g, err := call.Run(ctx)
		if err != nil {
			return Timing{}, err
		}
		wall[i], gpu[i] = time.Since(start), g
		if tick != nil {
			tick()
		}
	}
	tm := Timing{GPU: StatsOf(gpu), Wall: StatsOf(wall), Timing: "gpu"}
	tm.Median = time.Duration(tm.GPU.Median)
	if slices.Contains(gpu, 0) {
		// No timestamps (or a run without one): time the whole call.
		tm.GPU, tm.Timing = Stats{}, "wall"
		tm.Median = time.Duration(tm.Wall.Median)
	}
	return tm, nil
}
