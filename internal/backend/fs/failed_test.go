package fs

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
)

// I/O errors of the directory are backend failures; a permission error is
// one that retrying does not mend.
func TestFailedClassifies(t *testing.T) {
	for _, tc := range []struct {
		err    error
		denied bool
	}{
		{fs.ErrPermission, true},
		{&fs.PathError{Op: "open", Path: "k", Err: syscall.EACCES}, true},
		{&fs.PathError{Op: "open", Path: "k", Err: syscall.EPERM}, true},
		{&fs.PathError{Op: "read", Path: "k", Err: syscall.EIO}, false},
		{&fs.PathError{Op: "stat", Path: "k", Err: syscall.ESTALE}, false},
	} {
		err := failed(tc.err)
		if !errors.Is(err, object.ErrBackend) || errors.Is(err, object.ErrBackendDenied) != tc.denied || !errors.Is(err, tc.err) {
			t.Errorf("failed(%v) = %v: want ErrBackend, denied %v, and the cause", tc.err, err, tc.denied)
		}
	}
}
