package vk

import (
	"context"
	"strings"
	"testing"
)

// TestPresentationObjects: storage images and semaphores are counted and
// freed (by Close, once, or by the device's Close), a submission waits for
// the semaphore another signals, and what a compute-only instance and
// device lack is an error naming it.
func TestPresentationObjects(t *testing.T) {
	inst, dev, before := openTestDevice(t)
	img, err := dev.NewStorageImage(5, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.NewStorageImage(2, 2); err != nil { // left to the device's Close
		t.Fatal(err)
	}
	if _, err := dev.NewStorageImage(0, 3); err == nil {
		t.Error("a 0 x 3 image: no error")
	}
	sem, err := dev.NewSemaphore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.NewSemaphore(); err != nil { // left to the device's Close
		t.Fatal(err)
	}
	signal, err := dev.NewCommands(0)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := dev.NewCommands(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Commands{signal, wait} {
		if err := c.Begin(); err != nil {
			t.Fatal(err)
		}
	}
	signal.Transition(img, LayoutUndefined, LayoutGeneral)
	wait.Transition(img, LayoutGeneral, LayoutTransferSrc)
	for _, c := range []*Commands{signal, wait} {
		if err := c.End(); err != nil {
			t.Fatal(err)
		}
	}
	if err := signal.SubmitSignal(nil, sem); err != nil {
		t.Fatal(err)
	}
	if err := wait.SubmitSignal(sem, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Commands{wait, signal} {
		if err := c.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	img.Close()
	img.Close()
	sem.Close()

	checkNoWindow(t, inst, dev)
	if _, err := inst.NewDeviceWith(0, DeviceConfig{Extensions: []string{"VK_KHR_no_such_extension"}}); err == nil ||
		!strings.Contains(err.Error(), "VK_KHR_no_such_extension") {
		t.Errorf("a missing device extension: %v", err)
	}
	if _, err := NewInstance(InstanceConfig{Extensions: []string{"VK_KHR_no_such_instance_extension"}}); err == nil ||
		!strings.Contains(err.Error(), "VK_KHR_no_such_instance_extension") {
		t.Errorf("a missing instance extension: %v", err)
	}
	closeTestDevice(t, inst, dev, before)
}
