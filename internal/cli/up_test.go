package cli

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// up over ports another cluster holds fails, names the port, and does
// not claim the cluster is up.
func TestUpRefusesPortsInUse(t *testing.T) {
	base, err := localcluster.FreeBasePort("127.0", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.1.1:"+strconv.Itoa(base))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, out, errOut := run("up", "--data", t.TempDir(), "--port", strconv.Itoa(base), "--nodes", "1", "--addrs", "1")
	if code != 1 || strings.Contains(out, "is up") || strings.Contains(out, "export") {
		t.Errorf("exit %d, stdout %q; want 1 and no claim that the cluster is up", code, out)
	}
	for _, want := range []string{ln.Addr().String(), "in use", "--port"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %s", want, errOut)
		}
	}
}
