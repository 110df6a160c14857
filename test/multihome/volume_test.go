package multihome

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// TestVolumeMirrorsUseEveryNIC: a copies=2 volume written with 1 MiB
// blocks through n1's NBD server. n1 sends its mirror writes to n2 and n3
// over both of its NICs (a chunk stream connection per address of the
// peer), not only over the first; with a NIC of n2 pulled in the middle
// of a write, the writes go on without an error and every block reads
// back (fio verify) through n3.
func TestVolumeMirrorsUseEveryNIC(t *testing.T) {
	c := startCluster(t, options{clients: 1, rate: testRate()})
	n1, n2 := c.bed.Role("storage")[0], c.bed.Role("storage")[1]
	cl := c.bed.Role("client")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, h := range []int{1, 2} {
		host := c.bed.Role("storage")[h]
		if err := c.bed.WaitTCP(ctx, cl, net.JoinHostPort(host.Addrs[0], nbdPort), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	try := func(name string, args ...string) (string, error) {
		cmd := c.bed.Command(ctx, cl, name, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(cmd.Environ(), "SLIPSTREAM_NODE=http://"+net.JoinHostPort(n1.Addrs[0], intraPort), "SLIPSTREAM_SECRET=multihome-secret")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("%s %v: %w\n%s", name, args, err, out)
		}
		return string(out), nil
	}
	run := func(name string, args ...string) {
		t.Helper()
		if _, err := try(name, args...); err != nil {
			t.Fatal(err)
		}
	}
	// The nodes join through n1 as the test begins: the create needs two.
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		_, err := try(slipstreamBinary(t), "volume", "create", "mh", "--size", "128MiB", "--copies", "2", "--chunk", "4MiB")
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal(err)
		}
	}
	uri := func(h int) string {
		return fmt.Sprintf("nbd://%s/mh", net.JoinHostPort(c.bed.Role("storage")[h].Addrs[0], nbdPort))
	}
	fio := func(uri string, verify bool, seed int) []string {
		args := []string{"--name=mh", "--ioengine=nbd", "--uri=" + uri, "--rw=write", "--bs=1m", "--iodepth=8",
			"--size=64m", "--verify=crc32c", "--verify_state_save=0", fmt.Sprintf("--randseed=%d", seed)}
		if verify {
			return append(args, "--verify_only")
		}
		return append(args, "--do_verify=0", "--end_fsync=1")
	}

	before, err := c.bed.Counters(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	run("fio", fio(uri(0), false, 1)...)
	after, err := c.bed.Counters(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	tx1 := float64(after["eth1"].TxBytes - before["eth1"].TxBytes)
	tx2 := float64(after["eth2"].TxBytes - before["eth2"].TxBytes)
	t.Logf("rate per NIC %s: 64 MiB written through n1 in %v; n1 sent %.1f MB on eth1, %.1f MB on eth2",
		testRate(), time.Since(start).Round(time.Millisecond), tx1/1e6, tx2/1e6)
	if tx1+tx2 < 32<<20 {
		t.Fatalf("n1 sent only %.0f bytes for 64 MiB of copies=2 writes", tx1+tx2)
	}
	for k, tx := range []float64{tx1, tx2} {
		if tx/(tx1+tx2) < 0.3 {
			t.Errorf("n1's eth%d carried %.0f of the %.0f mirror bytes: not spread over both NICs", k+1, tx, tx1+tx2)
		}
	}

	// n2's second NIC is pulled during a write, then plugged back.
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(time.Second)
		if err := c.bed.SetLink(ctx, n2, "eth2", false); err != nil {
			t.Error(err)
			return
		}
		time.Sleep(2 * time.Second)
		if err := c.bed.SetLink(ctx, n2, "eth2", true); err != nil {
			t.Error(err)
		}
	}()
	run("fio", fio(uri(0), false, 2)...) // fails on an I/O error
	<-done
	run("fio", fio(uri(2), true, 2)...)
}
