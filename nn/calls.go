package nn

import (
	"context"
	"time"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/internal/engine"
)

// The layers' prepared calls are named types over the engine's one
// prepared call, as vkattn.Call is: Run, Output, Close and Record mean
// what they mean there.

// Run executes the recorded layer and waits for it; it returns the device
// time (0 without timestamps), also kept in Output().GPUTime.
func (c *MHACall) Run(ctx context.Context) (time.Duration, error) {
	return (*engine.Prepared[*MHAOutput])(c).Run(ctx)
}

// Output is the call's output; its tensors belong to the call.
func (c *MHACall) Output() *MHAOutput { return (*engine.Prepared[*MHAOutput])(c).Output() }

// Close frees the call's commands, scratch buffers and outputs.
func (c *MHACall) Close() { (*engine.Prepared[*MHAOutput])(c).Close() }

// Record records the layer's work into a host program's command buffer
// instead of submitting it, as vkattn.Call.Record does.
func (c *MHACall) Record(cmd vkattn.CommandBuffer) error {
	return engine.RecordFor((*engine.Prepared[*MHAOutput])(c), cmd.Device, cmd.Buffer)
}

// Run executes the recorded backward pass and waits for it; a gradient
// beyond float32's range is ErrOverflow.
func (c *MHAGradCall) Run(ctx context.Context) (time.Duration, error) {
	return (*engine.Prepared[*MHAGradients])(c).Run(ctx)
}

// Output is the call's gradients; they belong to the call.
func (c *MHAGradCall) Output() *MHAGradients { return (*engine.Prepared[*MHAGradients])(c).Output() }

// Close frees the call's commands, scratch buffers and gradients.
func (c *MHAGradCall) Close() { (*engine.Prepared[*MHAGradients])(c).Close() }

// Run executes the recorded backward pass and waits for it; a gradient
// beyond float32's range is ErrOverflow.
func (c *AdditiveGradCall) Run(ctx context.Context) (time.Duration, error) {
	return (*engine.Prepared[*AdditiveGradients])(c).Run(ctx)
}

// Output is the call's gradients; they belong to the call.
func (c *AdditiveGradCall) Output() *AdditiveGradients {
	return (*engine.Prepared[*AdditiveGradients])(c).Output()
}

// Close frees the call's commands, scratch buffers and gradients.
func (c *AdditiveGradCall) Close() { (*engine.Prepared[*AdditiveGradients])(c).Close() }
