//go:build !unix

package main

import (
	"fmt"

	vulkan "github.com/vulkan-go/vulkan"
)

// setProcAddr points vulkan-go at the system's Vulkan loader (vulkan-1.dll
// on Windows), through vulkan-go's own search.
func setProcAddr() error {
	if err := vulkan.SetDefaultGetInstanceProcAddr(); err != nil {
		return fmt.Errorf("cannot load the Vulkan loader: %w", err)
	}
	return nil
}
