package reference

import (
	"errors"
	"strings"
	"testing"
)

// wantError checks that err wraps target and mentions msg: the check of
// every case of the error tables (TestAdditiveErrors, TestMHAErrors).
func wantError(t *testing.T, err, target error, msg string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %q, want it to mention %q", err, msg)
	}
}
