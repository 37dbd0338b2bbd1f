package vkattn_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/vkattn/vkattn"
)

// Every test in this package shares two devices opened with the validation
// layer on: the default plan, and the same device forced onto the storage
// load path so both kernel paths are proven on whatever device CI has.
var (
	dev        *vkattn.Device
	storageDev *vkattn.Device
)

func TestMain(m *testing.M) {
	var err error
	if dev, err = vkattn.Open(vkattn.Config{Validation: true}); err != nil {
		fmt.Fprintln(os.Stderr, "open device:", err)
		os.Exit(2)
	}
	if storageDev, err = vkattn.Open(vkattn.Config{Validation: true, LoadPath: vkattn.StorageLoadPath}); err != nil {
		fmt.Fprintln(os.Stderr, "open device:", err)
		os.Exit(2)
	}
	code := m.Run()
	for _, d := range []*vkattn.Device{dev, storageDev} {
		if err := d.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close device:", err)
			code = 1
		}
	}
	// The suite fails on any validation message and on any leaked object.
	if msgs := vkattn.ValidationMessages(); len(msgs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d Vulkan validation message(s):\n", len(msgs))
		for _, m := range msgs {
			fmt.Fprintln(os.Stderr, " ", m)
		}
		code = 1
	}
	if n := vkattn.LiveObjects(); n != 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d Vulkan objects alive after Close\n", n)
		code = 1
	}
	os.Exit(code)
}
