package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/pki"
)

func TestVolumeCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nbd")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"no host", []string{"volume", "certs", dir}, 2},
		{"no dir", []string{"volume", "certs", "--host", "h"}, 2},
		{"bad days", []string{"volume", "certs", dir, "--host", "h", "--days", "0"}, 2},
		{"too many days", []string{"volume", "certs", dir, "--host", "h", "--days", "5000"}, 2},
		{"a URL as host", []string{"volume", "certs", dir, "--host", "nbd://h:10809"}, 1},
		{"ok", []string{"volume", "certs", dir, "--host", "10.0.1.11", "--host", "node1"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.code, out, errs)
			}
			if code == 0 && !strings.Contains(out, "nbd_tls: {cert: "+filepath.Join(dir, pki.ServerCert)) {
				t.Errorf("output does not give the nbd_tls line:\n%s", out)
			}
		})
	}
	for _, f := range []string{pki.CACert, pki.CAKey, pki.ServerCert, pki.ServerKey, pki.ClientCert, pki.ClientKey} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if _, err := pki.ClientConfig(dir, "node1"); err != nil {
		t.Errorf("the client certificates do not load: %v", err)
	}
}
