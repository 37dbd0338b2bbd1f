package vk

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
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
