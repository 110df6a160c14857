package nbd_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

func TestQuickPerf(t *testing.T) {
	if os.Getenv("QP") == "" {
		t.Skip()
	}
	d, p := fileExport(t, 512<<20)
	sock := serveUnix(t, nbd.Map{"disk": d})
	dir := t.TempDir()
	cmd := exec.Command("nbdkit", "-f", "-U", dir+"/k.sock", "file", p)
	cmd.Start()
	defer cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond)
	for _, bs := range strings.Split(os.Getenv("QP_BS"), ",") {
		for i := 0; i < 2; i++ {
			for _, u := range []string{"nbd+unix:///disk?socket=" + sock, "nbd+unix:///?socket=" + dir + "/k.sock"} {
				out, _ := exec.Command("fio", "--name=x", "--ioengine=nbd", "--uri="+u, "--rw="+os.Getenv("QP_RW"), "--bs="+bs, "--iodepth=32", "--numjobs=2", "--size=256m", "--offset_increment=256m", "--runtime=4", "--time_based", "--group_reporting").CombinedOutput()
				t.Logf("%s %s: %s", bs, u[:20], grep(string(out)))
			}
		}
	}
}

func grep(s string) string {
	out := ""
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "IOPS=") || strings.Contains(l, " lat (") {
			out += strings.TrimSpace(l) + " | "
		}
	}
	return out
}
