package cli

import (
	"os"
	"path/filepath"
	"slices"
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

func TestChunkLists(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int64
		text string
		err  bool
	}{
		{in: "3", want: []int64{3}, text: "3"},
		{in: "9,3, 7-8,8", want: []int64{3, 7, 8, 9}, text: "3, 7-9"},
		{in: "0-2,4", want: []int64{0, 1, 2, 4}, text: "0-2, 4"},
		{in: "", err: true},
		{in: "x", err: true},
		{in: "-1", err: true},
		{in: "5-3", err: true},
		{in: "1-", err: true},
		{in: "0-99999999", err: true},
	} {
		got, err := parseChunkList(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error, got %v", tc.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if s := chunkList(got); s != tc.text {
			t.Errorf("chunkList(%v) = %q, want %q", got, s, tc.text)
		}
	}
	var many []int64
	for i := range int64(50) {
		many = append(many, 2*i)
	}
	if s := chunkList(many); !strings.HasSuffix(s, ", 38, ... (50 in all)") {
		t.Errorf("50 runs: %q", s)
	}
}
