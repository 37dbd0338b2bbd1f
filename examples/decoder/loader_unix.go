//go:build unix

package main

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// open_vulkan dlopens the Vulkan loader and returns its
// vkGetInstanceProcAddr, or NULL. The library stays open for the
// process's life: vulkan-go keeps pointers into it.
static void *open_vulkan(const char *name) {
	void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		return NULL;
	}
	void *gipa = dlsym(lib, "vkGetInstanceProcAddr");
	if (!gipa) {
		dlclose(lib);
	}
	return gipa;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// setProcAddr points vulkan-go at the system's Vulkan loader. vulkan-go's
// own default dlopens libvulkan.so, which only the development package
// installs; the runtime package has the versioned name.
func setProcAddr() error {
	name := "libvulkan.so.1"
	if runtime.GOOS == "darwin" {
		name = "libvulkan.1.dylib"
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	gipa := C.open_vulkan(cname)
	if gipa == nil {
		return fmt.Errorf("cannot load the Vulkan loader %s (on Debian and Ubuntu: apt-get install libvulkan1 mesa-vulkan-drivers)", name)
	}
	vulkan.SetGetInstanceProcAddr(gipa)
	return nil
}
