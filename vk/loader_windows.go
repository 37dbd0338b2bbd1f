package vk

/*
#include <windows.h>
#include <stdint.h>

// vkattn_open_library loads the DLL name and returns its
// vkGetInstanceProcAddr, or NULL with *code set to GetLastError's (0 when
// the DLL has no such function).
static void *vkattn_open_library(const wchar_t *name, uint32_t *code) {
	*code = 0;
	HMODULE lib = LoadLibraryW(name);
	if (!lib) {
		*code = GetLastError();
		return NULL;
	}
	void *gipa = (void *)GetProcAddress(lib, "vkGetInstanceProcAddr");
	if (!gipa) FreeLibrary(lib);
	return gipa;
}
*/
import "C"

import (
	"errors"
	"syscall"
	"unsafe"
)

// openLibrary loads the DLL name (a file name Windows' DLL search order
// finds, or a path) and returns its vkGetInstanceProcAddr. The DLL stays
// loaded for the process's life.
func openLibrary(name string) (unsafe.Pointer, error) {
	wname, err := syscall.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	var code C.uint32_t
	gipa := C.vkattn_open_library((*C.wchar_t)(unsafe.Pointer(wname)), &code)
	switch {
	case gipa != nil:
		return gipa, nil
	case code != 0:
		return nil, syscall.Errno(code)
	}
	return nil, errors.New("it has no vkGetInstanceProcAddr")
}
