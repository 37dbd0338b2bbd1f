package vk

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vkattn/vkattn/core"
	"golang.org/x/sys/cpu"
)

// TestLoaderCandidates: the libraries each OS's build looks for, and
// VKATTN_VULKAN_LIBRARY replacing them, on any OS the test runs on.
func TestLoaderCandidates(t *testing.T) {
	for _, c := range []struct {
		goos, env string
		want      []string
	}{
		{"linux", "", []string{"libvulkan.so.1"}},
		{"freebsd", "", []string{"libvulkan.so.1"}},
		{"windows", "", []string{"vulkan-1.dll"}},
		{"darwin", "", []string{"libvulkan.1.dylib", "libMoltenVK.dylib"}},
		{"linux", "/opt/vk/libvulkan.so.1", []string{"/opt/vk/libvulkan.so.1"}},
		{"windows", `C:\VulkanSDK\Bin\vulkan-1.dll`, []string{`C:\VulkanSDK\Bin\vulkan-1.dll`}},
		{"darwin", "/usr/local/lib/libMoltenVK.dylib", []string{"/usr/local/lib/libMoltenVK.dylib"}},
	} {
		if got := loaderCandidates(c.goos, c.env); !slices.Equal(got, c.want) {
			t.Errorf("loaderCandidates(%q, %q) = %q, want %q", c.goos, c.env, got, c.want)
		}
	}
	for goos, want := range map[string]string{"linux": "libvulkan1", "windows": "vulkan-1.dll", "darwin": "MoltenVK"} {
		if h := loaderHint(goos); !strings.Contains(h, want) || !strings.Contains(h, libraryEnv) {
			t.Errorf("loaderHint(%q) = %q, want it to name %s and %s", goos, h, want, libraryEnv)
		}
	}
}

// TestLoaderNotFound: when no candidate loads (none of macOS's is on
// this machine), the error names each one tried with why, says how to get
// a loader, and wraps ErrNoDriver.
func TestLoaderNotFound(t *testing.T) {
	if runtime.GOOS == "darwin" {
		t.Skip("macOS's loader may be installed here")
	}
	_, err := openLoader("darwin", "")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("openLoader(darwin) = %v, want ErrNoDriver", err)
	}
	for _, want := range []string{"libvulkan.1.dylib (", "libMoltenVK.dylib (", "brew install", libraryEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
}

// TestLoaderFromEnvironment: VKATTN_VULKAN_LIBRARY names the loader (in a
// child process, as loading happens once per process): a library that
// does not exist or is no Vulkan loader is refused with ErrNoDriver, naming
// it and the variable, and the usual loader named by path is used.
func TestLoaderFromEnvironment(t *testing.T) {
	if lib := os.Getenv("VKATTN_SUBPROCESS_LIBRARY"); lib != "" {
		inst, err := NewInstance(InstanceConfig{})
		if lib == "ok" {
			if err != nil {
				t.Fatalf("%s=%s: %v", libraryEnv, os.Getenv(libraryEnv), err)
			}
			inst.Close()
			return
		}
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("%s=%s: %v, want ErrNoDriver", libraryEnv, os.Getenv(libraryEnv), err)
		}
		for _, want := range []string{os.Getenv(libraryEnv), libraryEnv, lib} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		return
	}
	// Each library, and what the child's error must say besides its name.
	cases := map[string]string{"/nonexistent/libvulkan.so.1": libraryEnv}
	if runtime.GOOS == "linux" {
		cases["/nonexistent/libvulkan.so.1"] = "No such file"
		cases["libm.so.6"] = "no vkGetInstanceProcAddr"
		cases["libvulkan.so.1"] = "ok"
	}
	for lib, want := range cases {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), libraryEnv+"="+lib, "VKATTN_SUBPROCESS_LIBRARY="+want)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Errorf("%s=%s in a subprocess: %v\n%s", libraryEnv, lib, err, out)
		}
	}
}

// TestLavapipeWidth: where the process has not chosen lavapipe's vector
// width, loading asks for 512 bits on a CPU with AVX-512 (16-lane
// subgroups) and leaves the variable unset elsewhere (llvmpipe's own width:
// 8 lanes with AVX, 4 with SSE only on x86-64); a width the process chose
// stands. In child processes, as the driver reads the variable once per
// process.
func TestLavapipeWidth(t *testing.T) {
	if os.Getenv("VKATTN_SUBPROCESS_WIDTH") != "" {
		inst, err := NewInstance(InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close()
		fmt.Printf("%s=%q\n", LavapipeWidthEnv, os.Getenv(LavapipeWidthEnv))
		for _, d := range inst.Devices() {
			if d.DriverID == core.DriverIDLavapipe {
				fmt.Printf("lavapipe subgroup %d\n", d.Limits.SubgroupSize)
			}
		}
		return
	}
	// The default's subgroup width where it is known; other CPUs' llvmpipe
	// picks its own, and only the variable is checked there.
	defaultEnv, defaultLanes := `""`, ""
	switch {
	case cpuHasAVX512():
		defaultEnv, defaultLanes = `"512"`, "16"
	case runtime.GOARCH == "amd64" && cpu.X86.HasAVX:
		defaultLanes = "8"
	case runtime.GOARCH == "amd64":
		defaultLanes = "4"
	}
	for _, c := range []struct{ env, wantEnv, wantLanes string }{
		{"", defaultEnv, defaultLanes},
		{LavapipeWidthEnv + "=256", `"256"`, "8"},
		{LavapipeWidthEnv + "=128", `"128"`, "4"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, LavapipeWidthEnv+"=") }), "VKATTN_SUBPROCESS_WIDTH=1")
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q in a subprocess: %v\n%s", c.env, err, out)
		}
		want := []string{LavapipeWidthEnv + "=" + c.wantEnv + "\n", "lavapipe subgroup "}
		if c.wantLanes != "" {
			want[1] += c.wantLanes + "\n"
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("environment %q: want %q in\n%s", c.env, w, out)
			}
		}
	}
}
