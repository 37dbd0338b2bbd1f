package harness

import (
	"testing"

	"github.com/vkattn/vkattn/internal/devtest"
)

// The tests run on devtest's shared devices, opened with the validation
// layer on; any validation message or leaked object fails the suite.
func TestMain(m *testing.M) { devtest.Main(m) }
