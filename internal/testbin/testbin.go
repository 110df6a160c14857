// Package testbin builds the slipstream binary for tests and benchmarks
// that run real node processes.
package testbin

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build compiles cmd/slipstream of this module into dir and returns the
// binary's path.
func Build(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "slipstream")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/slipstream")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building slipstream: %v: %s", err, out)
	}
	return bin, nil
}
