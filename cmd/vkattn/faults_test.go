package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkattn/vkattn"
	"github.com/vkattn/vkattn/vk"
)

// TestOutputsAllOrNoneUnderFaults: whichever Vulkan call of `vkattn run`
// fails (the first call of each site the command reaches, with a lost
// device, out of memory or an initialization failure in turn), the
// command writes all of its outputs or none, exits 1 naming the failure,
// and leaves nothing alive. The package's tests run one at a time, so
// the process-wide fault touches this command alone.
func TestOutputsAllOrNoneUnderFaults(t *testing.T) {
	withDevice(t)
	dir := t.TempDir()
	const H, L, S, d = 2, 3, 7, 8
	rnd := normals(29, 1)
	q := writeArray(t, dir, "q.npy", []int{H, L, d}, rnd(H*L*d, 1))
	k := writeArray(t, dir, "k.npy", []int{H, S, d}, rnd(H*S*d, 1))
	v := writeArray(t, dir, "v.npy", []int{H, S, d}, rnd(H*S*d, 1))
	o, lse := filepath.Join(dir, "o.npy"), filepath.Join(dir, "lse.npy")
	args := []string{"run", "-q", q, "-k", k, "-v", v, "--causal", "bottom-right", "-o", o, "--lse", lse}
	live := vkattn.LiveObjects()

	vk.SetFault(&vk.Fault{Nth: -1})
	_, errOut, code := cli(t, args...)
	vk.SetFault(nil)
	if code != exitOK {
		t.Fatalf("without a fault: exit %d: %s", code, errOut)
	}
	sites := vk.FaultSites()
	seen := map[string]bool{}
	results := []vulkan.Result{vulkan.ErrorDeviceLost, vulkan.ErrorOutOfDeviceMemory, vulkan.ErrorOutOfHostMemory, vulkan.ErrorInitializationFailed}
	points := 0
	for i, site := range sites {
		if seen[site] {
			continue
		}
		seen[site] = true
		res := results[points%len(results)]
		points++
		t.Run(fmt.Sprintf("call %d %s", i+1, site), func(t *testing.T) {
			os.Remove(o)
			os.Remove(lse)
			vk.SetFault(&vk.Fault{Nth: i + 1, Result: res})
			stdout, errOut, code := cli(t, args...)
			vk.SetFault(nil)
			_, errO := os.Stat(o)
			_, errL := os.Stat(lse)
			switch {
			case code == exitOK && (errO != nil || errL != nil):
				t.Errorf("exit 0 with outputs missing (%v, %v)", errO, errL)
			case code != exitOK && (errO == nil || errL == nil):
				t.Errorf("exit %d with an output written (o: %v, lse: %v): %s", code, errO == nil, errL == nil, errOut)
			case code != exitOK && code != exitFail:
				t.Errorf("exit %d, want %d: %s\n%s", code, exitFail, errOut, stdout)
			}
			if n := vkattn.LiveObjects(); n != live {
				t.Errorf("%d Vulkan objects alive after the command, want %d", n, live)
			}
		})
	}
	t.Logf("%d calls, %d sites failed in turn", len(sites), points)
}
