package multihome

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// iperfCeiling measures what plain TCP gets through the same testbed in the
// same pattern as the GET load: iperf3 in reverse mode (the storage host
// sends, like a GET) from every storage NIC in use to every client host
// over the matching client NIC, all at once, streams streams per pair, for
// secs seconds with the first omit seconds left out. It returns the
// aggregate received Mbit/s. It is the limit of this bed on this machine at
// that moment, shaping and shared CPU included.
func (c *bedCluster) iperfCeiling(t *testing.T, nics, streams, secs, omit int) float64 {
	t.Helper()
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Fatalf("iperf3 not found (scripts/setup.sh installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers { // by PID: `ip netns exec` execs iperf3 in place
			if s.ProcessState == nil {
				_ = s.Process.Kill()
				_ = s.Wait()
			}
		}
	}()
	clients := c.bed.Role("client")
	type flow struct {
		server, client, port string
		cl                   int
	}
	var flows []flow
	for _, h := range c.bed.Role("storage") {
		for k := 0; k < nics; k++ {
			for j, cl := range clients {
				port := strconv.Itoa(5201 + j)
				s := c.bed.Command(ctx, h, "iperf3", "-s", "-B", h.Addrs[k], "-p", port)
				s.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := s.Start(); err != nil {
					t.Fatal(err)
				}
				servers = append(servers, s)
				flows = append(flows, flow{server: h.Addrs[k], client: cl.Addrs[k], port: port, cl: j})
			}
		}
	}
	for _, f := range flows {
		if err := c.bed.WaitTCP(ctx, clients[f.cl], f.server+":"+f.port, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var total float64
	var wg sync.WaitGroup
	errc := make(chan error, len(flows))
	for _, f := range flows {
		wg.Add(1)
		go func(f flow) {
			defer wg.Done()
			cmd := c.bed.Command(ctx, clients[f.cl], "iperf3", "-c", f.server, "-B", f.client, "-p", f.port, "-R",
				"-P", strconv.Itoa(streams), "-t", strconv.Itoa(secs), "-O", strconv.Itoa(omit), "-J")
			var out bytes.Buffer
			cmd.Stdout = &out
			if err := cmd.Run(); err != nil {
				errc <- fmt.Errorf("iperf3 %s -> %s: %v: %s", f.server, f.client, err, out.Bytes())
				return
			}
			var res struct {
				Error string `json:"error"`
				End   struct {
					SumReceived struct {
						BitsPerSecond float64 `json:"bits_per_second"`
					} `json:"sum_received"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				errc <- fmt.Errorf("iperf3 %s -> %s: %v", f.server, f.client, err)
				return
			}
			if res.Error != "" || res.End.SumReceived.BitsPerSecond == 0 {
				errc <- fmt.Errorf("iperf3 %s -> %s: no result: %s", f.server, f.client, res.Error)
				return
			}
			mu.Lock()
			total += res.End.SumReceived.BitsPerSecond / 1e6
			mu.Unlock()
		}(f)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	return total
}
