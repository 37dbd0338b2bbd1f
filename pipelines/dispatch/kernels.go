// Package dispatch binds and records vkattn's kernels on a Vulkan device:
// the kernel library, bound steps and prepared submissions. What it binds
// comes planned from package pipelines, which needs no driver; dispatch
// adds the device's buffers, descriptor sets and command buffers.
package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vkattn/vkattn/pipelines"
	"github.com/vkattn/vkattn/shaders"
	"github.com/vkattn/vkattn/vk"
)

// Kernels is vkattn's kernel library on one device: every variant is built
// on first use and kept until Close. Safe for concurrent use: kernels
// compile outside the lock, so a call whose kernel is built never waits
// for another's compile, and two variants compile at once (each once).
type Kernels struct {
	dev      *vk.Device
	mu       sync.Mutex // guards built, building and dummy
	built    map[kernelKey]*vk.Kernel
	building map[kernelKey]*pendingKernel
	dummy    *vk.Buffer // bound where an optional input or output is absent
}

// pendingKernel is a kernel being compiled; done closes when k or err is
// set.
type pendingKernel struct {
	done chan struct{}
	k    *vk.Kernel
	err  error
}

// NewKernels prepares the kernel library of dev. Nothing is built yet.
func NewKernels(dev *vk.Device) *Kernels {
	return &Kernels{dev: dev, built: map[kernelKey]*vk.Kernel{}, building: map[kernelKey]*pendingKernel{}}
}

// Close frees the library's kernels and buffers.
func (ks *Kernels) Close() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, k := range ks.built {
		k.Close()
	}
	ks.built = map[kernelKey]*vk.Kernel{}
	ks.dummy.Close()
	ks.dummy = nil
}

// kernelKey names a built kernel: its variant, its specialization
// constants and its push-constant size.
type kernelKey struct {
	variant  pipelines.Variant
	spec     string // the specialization constants, as fmt prints them
	push     uint32
	subgroup uint32 // required subgroup size (full subgroups); 0: any
}

// kernel returns the kernel k describes, building it from its variant's
// SPIR-V on first use.
func (ks *Kernels) kernel(k pipelines.KernelSpec) (*vk.Kernel, error) {
	return ks.build(kernelKey{variant: k.Variant, push: k.Push, subgroup: k.Subgroup}, k.Bindings, k.Spec)
}

func (ks *Kernels) build(key kernelKey, bindings []vk.BindingType, spec []vk.SpecConstant) (*vk.Kernel, error) {
	v := key.variant
	key.spec = fmt.Sprint(spec)
	ks.mu.Lock()
	if k, ok := ks.built[key]; ok {
		ks.mu.Unlock()
		return k, nil
	}
	if p, ok := ks.building[key]; ok {
		ks.mu.Unlock()
		<-p.done
		return p.k, p.err
	}
	p := &pendingKernel{done: make(chan struct{})}
	ks.building[key] = p
	ks.mu.Unlock()
	defer close(p.done)

	code, err := shaders.SPIRV(v.Name())
	if err == nil {
		p.k, err = ks.dev.NewKernel(vk.KernelSpec{
			Name: fmt.Sprintf("%s%v", v, spec), SPIRV: code, Bindings: bindings, Spec: spec, PushSize: key.push,
			SubgroupSize: key.subgroup, FullSubgroups: key.subgroup > 0,
		})
	}
	p.err = err
	ks.mu.Lock()
	defer ks.mu.Unlock()
	delete(ks.building, key)
	if err == nil {
		ks.built[key] = p.k
	}
	return p.k, p.err
}

// or returns b, or a small dummy buffer for an absent optional binding.
func (ks *Kernels) or(b *vk.Buffer) (*vk.Buffer, error) {
	if b != nil {
		return b, nil
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.dummy == nil {
		var err error
		if ks.dummy, err = ks.dev.NewBuffer(16); err != nil {
			return nil, err
		}
	}
	return ks.dummy, nil
}

// closer is what a Step owns and frees.
type closer interface{ Close() }

// update is a parameter block a Step's commands write into its buffer
// before the dispatches (vkCmdUpdateBuffer), so binding needs no host
// transfer: on a discrete GPU, where the buffer is not mapped, that would
// be a staging round trip per block.
type update struct {
	buf  *vk.Buffer
	data []byte
}

// params makes a buffer of the parameter block data (a multiple of 4
// bytes), written by the step's commands, which the step owns.
func (s *Step) params(ks *Kernels, data []byte) (*vk.Buffer, error) {
	buf, err := ks.dev.NewBuffer(uint64(len(data)))
	if err != nil {
		return nil, err
	}
	s.own(buf)
	s.updates = append(s.updates, update{buf, data})
	return buf, nil
}

// dispatch is one kernel launch of a Step.
type dispatch struct {
	kernel *vk.Kernel
	set    *vk.DescriptorSet
	groups [3]uint32
	push   []byte
	flops  float64 // the attention work it does (planChunks), 0 for the rest
}

// Step is bound work (one or more dispatches with their parameters and
// scratch buffers) ready to be recorded; a Prepared sequence of Steps runs
// as one submission with a barrier after every dispatch.
type Step struct {
	dispatches []dispatch
	updates    []update
	owned      []closer
}

// recordUpdates records the step's parameter blocks into c.
func (s *Step) recordUpdates(c *vk.Commands) error {
	for _, u := range s.updates {
		if err := c.Update(u.buf, 0, u.data); err != nil {
			return err
		}
	}
	return nil
}

// recordDispatches records dispatches into c, a barrier after each.
func recordDispatches(c *vk.Commands, ds []dispatch) error {
	for _, d := range ds {
		if d.push != nil {
			if err := c.Push(d.kernel, d.push); err != nil {
				return err
			}
		}
		if err := c.Dispatch(d.kernel, d.set, d.groups); err != nil {
			return err
		}
		c.Barrier()
	}
	return nil
}

// own records something the step frees on Close.
func (s *Step) own(c closer) { s.owned = append(s.owned, c) }

// Close frees what the step owns. Steps handed to Prepare belong to it.
func (s *Step) Close() {
	if s == nil {
		return
	}
	for i := len(s.owned) - 1; i >= 0; i-- {
		s.owned[i].Close()
	}
	s.owned = nil
}

// Prepared is a sequence of Steps recorded once, replayable with Run. Its
// methods are serialized, so it is safe for concurrent use (runs take
// turns). Its dispatches are recorded into one command buffer, or, where
// they do more work than one submission should carry (pipelines.DispatchFLOPs), into
// several, submitted one after another.
type Prepared struct {
	mu    sync.Mutex
	steps []*Step
	// parts are the dispatches of each command buffer, in order.
	parts [][]dispatch
	cmds  []*vk.Commands
	// wrapped: the commands hold RunWith's transfers, which Run must not
	// replay.
	wrapped bool
}

// Prepare records steps in order, with a barrier after each dispatch and
// timestamps around each submission. The Prepared owns the steps (also
// when Prepare fails).
func (ks *Kernels) Prepare(steps ...*Step) (*Prepared, error) {
	pr := &Prepared{steps: steps}
	most, work := pipelines.DispatchFLOPs(ks.dev.Info.DeviceInfo), 0.0
	pr.parts = [][]dispatch{nil}
	for _, s := range steps {
		for _, d := range s.dispatches {
			if last := len(pr.parts) - 1; work+d.flops > most && len(pr.parts[last]) > 0 && d.flops > 0 {
				pr.parts, work = append(pr.parts, nil), 0
			}
			pr.parts[len(pr.parts)-1] = append(pr.parts[len(pr.parts)-1], d)
			work += d.flops
		}
	}
	for range pr.parts {
		c, err := ks.dev.NewCommands(2)
		if err != nil {
			pr.Close()
			return nil, err
		}
		pr.cmds = append(pr.cmds, c)
	}
	if err := pr.record(); err != nil {
		pr.Close()
		return nil, err
	}
	return pr, nil
}

func (pr *Prepared) record() error { return pr.recordWith(nil, nil) }

// recordWith records before (transfers into the inputs) and the steps'
// parameter blocks into the first command buffer, the dispatches, then
// after (transfers out of the outputs) into the last, with barriers
// between.
func (pr *Prepared) recordWith(before, after func(*vk.Commands) error) error {
	pr.wrapped = true // until a plain recording ends well, Run records anew
	for i, c := range pr.cmds {
		if err := c.Begin(); err != nil {
			return err
		}
		if i == 0 {
			if before != nil {
				if err := before(c); err != nil {
					return err
				}
			}
			updated := false
			for _, s := range pr.steps {
				if err := s.recordUpdates(c); err != nil {
					return err
				}
				updated = updated || len(s.updates) > 0
			}
			if before != nil || updated {
				c.Barrier()
			}
		}
		c.Timestamp(0)
		if err := recordDispatches(c, pr.parts[i]); err != nil {
			return err
		}
		c.Timestamp(1)
		if i == len(pr.cmds)-1 && after != nil {
			if err := after(c); err != nil {
				return err
			}
			c.Barrier()
		}
		if err := c.End(); err != nil {
			return err
		}
	}
	pr.wrapped = before != nil || after != nil
	return nil
}

// RecordInto records the whole sequence into c, a host program's command
// buffer (vk.Device.Foreign): a barrier that makes earlier compute and
// transfer writes visible, before's transfers, the parameter blocks, every
// dispatch (all parts: the host's submission carries them at once), after's
// transfers and a closing barrier. Nothing is submitted; no timestamps.
func (pr *Prepared) RecordInto(c *vk.Commands, before, after func(*vk.Commands) error) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.cmds == nil {
		return fmt.Errorf("dispatch: %w: prepared call", vk.ErrClosed)
	}
	c.Barrier()
	if before != nil {
		if err := before(c); err != nil {
			return err
		}
	}
	for _, s := range pr.steps {
		if err := s.recordUpdates(c); err != nil {
			return err
		}
	}
	c.Barrier()
	for _, part := range pr.parts {
		if err := recordDispatches(c, part); err != nil {
			return err
		}
	}
	if after != nil {
		if err := after(c); err != nil {
			return err
		}
		c.Barrier()
	}
	return c.Done()
}

// Run submits the recorded sequence and waits for it; it returns the device
// time when the device has timestamps (0 otherwise). A done ctx submits
// nothing; a ctx done while waiting returns at once (within a fence slice)
// and leaves the submission in flight running (the next Run or Close waits
// for it) but submits no more: a call of several submissions stops between
// them, its outputs then undefined.
func (pr *Prepared) Run(ctx context.Context) (time.Duration, error) {
	return pr.run(ctx, func() error {
		if pr.wrapped {
			return pr.record()
		}
		return nil
	})
}

// RunWith is Run with before's transfers (host data staged into the
// inputs) ahead of the steps and after's (outputs to the host) behind
// them, all in one submission and one wait: a decode step's round trip.
// The commands are recorded anew for each RunWith, so what the transfers
// copy may change from run to run.
func (pr *Prepared) RunWith(ctx context.Context, before, after func(*vk.Commands) error) (time.Duration, error) {
	return pr.run(ctx, func() error { return pr.recordWith(before, after) })
}

// run is Run and RunWith: once what an earlier cancelled run left in
// flight has finished, and unless ctx is done, record (if need be) and
// submit, then wait.
func (pr *Prepared) run(ctx context.Context, record func() error) (time.Duration, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.cmds == nil {
		return 0, fmt.Errorf("dispatch: %w: prepared call", vk.ErrClosed)
	}
	for _, c := range pr.cmds {
		if err := c.Wait(ctx); err != nil {
			return 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := record(); err != nil {
		return 0, err
	}
	return pr.submitAndWait(ctx)
}

// submitAndWait submits the recorded commands and waits for them. The
// caller holds pr.mu.
func (pr *Prepared) submitAndWait(ctx context.Context) (time.Duration, error) {
	var total time.Duration
	for i, c := range pr.cmds {
		if i > 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		if err := c.Submit(); err != nil {
			return 0, err
		}
		if err := c.Wait(ctx); err != nil {
			return 0, err
		}
		t, _, err := c.Elapsed(0, 1)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// Close frees the commands (waiting for work in flight) and the steps.
func (pr *Prepared) Close() {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, c := range pr.cmds {
		c.Close()
	}
	pr.cmds = nil
	for _, s := range pr.steps {
		s.Close()
	}
	pr.steps = nil
}
