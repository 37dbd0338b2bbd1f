package engine

import (
	"errors"
	"fmt"

	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/vk"
)

var errorf = core.Errorf

// driverError makes the vk layer's no-driver error one of vkattn's
// (ErrNoDriver), its message kept.
func driverError(err error) error {
	if errors.Is(err, vk.ErrNoDriver) && !errors.Is(err, core.ErrNoDriver) {
		return fmt.Errorf("%w: %w", core.ErrNoDriver, err)
	}
	return err
}
