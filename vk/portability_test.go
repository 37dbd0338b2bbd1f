package vk

import (
	"slices"
	"strings"
	"testing"
)

// TestPortabilityInstanceRequest: the instance asks for portability
// enumeration, with its create flag, exactly when the loader offers the
// extension.
func TestPortabilityInstanceRequest(t *testing.T) {
	for _, c := range []struct {
		name      string
		offered   []string
		wantExts  []string
		wantFlags uint32
	}{
		{"nothing offered", nil, nil, 0},
		{"older loader", []string{"VK_KHR_surface", "VK_EXT_debug_report"}, nil, 0},
		{"offered", []string{"VK_KHR_surface", "VK_KHR_portability_enumeration"}, []string{"VK_KHR_portability_enumeration"}, 0x1},
		{"a prefix is not the name", []string{"VK_KHR_portability"}, nil, 0},
	} {
		exts, flags := portabilityInstance(c.offered)
		if !slices.Equal(exts, c.wantExts) || flags != c.wantFlags {
			t.Errorf("%s: portabilityInstance(%q) = %q, %#x; want %q, %#x", c.name, c.offered, exts, flags, c.wantExts, c.wantFlags)
		}
	}
}

// TestPortabilityDeviceRequest: a device enables VK_KHR_portability_subset
// exactly when its physical device offers it.
func TestPortabilityDeviceRequest(t *testing.T) {
	for _, c := range []struct {
		name    string
		offered []string
		want    []string
	}{
		{"nothing offered", nil, nil},
		{"a conformant device", []string{"VK_EXT_memory_budget", "VK_EXT_subgroup_size_control"}, nil},
		{"MoltenVK", []string{"VK_EXT_subgroup_size_control", "VK_KHR_portability_subset", "VK_EXT_memory_budget"}, []string{"VK_KHR_portability_subset"}},
	} {
		if got := portabilityDevice(c.offered); !slices.Equal(got, c.want) {
			t.Errorf("%s: portabilityDevice(%q) = %q, want %q", c.name, c.offered, got, c.want)
		}
	}
}

// TestAppendNew: requested extensions are enabled once however many
// reasons ask for them.
func TestAppendNew(t *testing.T) {
	got := appendNew([]string{"a", "b"}, "b", "c", "c")
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("appendNew = %q, want %q", got, want)
	}
}

// TestPortabilityEnumerationEnabled: where the loader offers
// VK_KHR_portability_enumeration (Debian 12's 1.3.239 does), the instance
// enables it, lavapipe is still listed, and its device opens with the
// extensions its physical device requires (no portability subset there).
func TestPortabilityEnumerationEnabled(t *testing.T) {
	if err := load(); err != nil {
		t.Fatal(err)
	}
	offered, err := instanceExtensions()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(offered, extPortabilityEnumeration) {
		t.Skipf("the loader does not offer %s (it offers %s)", extPortabilityEnumeration, strings.Join(offered, ", "))
	}
	inst, dev, before := openTestDevice(t)
	defer closeTestDevice(t, inst, dev, before)
	if got := inst.Extensions(); !slices.Contains(got, extPortabilityEnumeration) {
		t.Errorf("instance extensions %q lack %s", got, extPortabilityEnumeration)
	}
	lavapipe := false
	for _, d := range inst.Devices() {
		lavapipe = lavapipe || strings.Contains(d.Name, "llvmpipe")
	}
	if !lavapipe {
		t.Errorf("no llvmpipe device among %d with portability enumeration on", len(inst.Devices()))
	}
	offeredDev, err := deviceExtensions(inst.handle, dev.Info.handle)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Contains(dev.Extensions(), extPortabilitySubset), slices.Contains(offeredDev, extPortabilitySubset); got != want {
		t.Errorf("%s enabled: %v; the physical device offers it: %v (the two must agree)", extPortabilitySubset, got, want)
	}
}
