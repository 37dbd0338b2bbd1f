package main

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/core"
	"github.com/vkattn/vkattn/internal/devtest"
)

// run and decode with --kv-dtype iq4_nl (--check passing) against float64
// attention on K and V dequantized from iq4_nl; Q in iq4_nl is refused.
func TestIQ4NLCommands(t *testing.T) {
	withDevice(t)
	r := rand.New(rand.NewPCG(29, 29))
	dir := t.TempDir()
	qPath, kPath, vPath := quantizedCommands(t, r, dir, "iq4_nl", func(x []float32) []float32 {
		return devtest.RoundAll(vkattn.IQ4_NL, x)
	})
	checkRefused(t, []string{"run", "-q", qPath, "-k", kPath, "-v", vPath, "--dtype", "iq4_nl"}, exitUsage, "--kv-dtype iq4_nl", "")
}

// The help of every command that takes --kv-dtype names every quantized
// K/V type of core.QuantTypes, so a type added to the table is not left
// out of the -h texts.
func TestHelpNamesEveryQuantType(t *testing.T) {
	for name, text := range map[string]string{"run": runUsage, "decode": decodeUsage, "bench": benchUsage} {
		for _, q := range core.QuantTypes {
			if !strings.Contains(text, q.Name) {
				t.Errorf("vkattn %s -h does not name %s", name, q.Name)
			}
		}
	}
}
