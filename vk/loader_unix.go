//go:build unix

package vk

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// vkattn_open_library dlopens name and returns its vkGetInstanceProcAddr,
// or NULL with *err set (dlerror's text, or NULL when the library has no
// such function).
static void *vkattn_open_library(const char *name, const char **err) {
	*err = NULL;
	void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		*err = dlerror();
		return NULL;
	}
	void *gipa = dlsym(lib, "vkGetInstanceProcAddr");
	if (!gipa) dlclose(lib);
	return gipa;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// openLibrary dlopens name (a file name the dynamic linker searches for, or
// a path) and returns its vkGetInstanceProcAddr. The library stays open
// for the process's life.
func openLibrary(name string) (unsafe.Pointer, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var cerr *C.char
	gipa := C.vkattn_open_library(cname, &cerr)
	switch {
	case gipa != nil:
		return gipa, nil
	case cerr != nil:
		return nil, errors.New(C.GoString(cerr))
	}
	return nil, errors.New("it has no vkGetInstanceProcAddr")
}
