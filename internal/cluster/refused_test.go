package cluster_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// hangProxy forwards TCP connections to a node's listener until hang is
// set; from then on it accepts connections and never answers, as a hung
// host would.
type hangProxy struct {
	ln     net.Listener
	target atomic.Value // string
	hang   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// setHang makes the proxy hang: the connections it forwards are cut, new
// ones are held.
func (p *hangProxy) setHang() {
	p.hang.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func newHangProxy(t *testing.T) *hangProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangProxy{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			target, _ := p.target.Load().(string)
			if p.hang.Load() || target == "" {
				continue // held open, never answered
			}
			go func() {
				up, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				p.mu.Lock()
				p.conns = append(p.conns, up)
				p.mu.Unlock()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
				c.Close()
			}()
		}
	}()
	return p
}

// ConfirmRefused marks a member down at once when its addresses refuse
// connections, says a member that answers the leader is not gone, and for
// one that hangs waits for the health checks' verdict instead of marking
// it down on the report.
func TestConfirmRefused(t *testing.T) {
	proxy := newHangProxy(t)
	const downAfter = 3 * time.Second
	tc := clustertest.Start(t, clustertest.Options{N: 4, DownAfter: downAfter, Announce: func(n *clustertest.Node, self *cluster.NodeInfo) {
		if n.Index == 3 { // node4 is reached through the proxy
			proxy.target.Store(self.IntraAddrs[0])
			self.IntraAddrs = []string{proxy.ln.Addr().String()}
		}
	}})
	ctx := testCtx(t, time.Minute)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var asker, refusing *clustertest.Node // followers, not node4
	for _, n := range tc.Nodes() {
		switch {
		case n == leader || n.Index == 3:
		case asker == nil:
			asker = n
		default:
			refusing = n
		}
	}
	// Up and answering: not gone.
	if down, err := asker.Cluster().ConfirmRefused(ctx, refusing.ID); down || err != nil {
		t.Fatalf("ConfirmRefused of a node that answers = %v, %v", down, err)
	}
	// Its process gone: down at once, well before the health checks.
	tc.Stop(refusing)
	start := time.Now()
	if down, err := asker.Cluster().ConfirmRefused(ctx, refusing.ID); !down || err != nil {
		t.Fatalf("ConfirmRefused of a stopped node = %v, %v", down, err)
	}
	if took := time.Since(start); took > downAfter/2 {
		t.Errorf("a node whose addresses refuse connections was marked down after %v, not at once (health checks: %v)", took, downAfter)
	}
	if st := leader.Cluster().Map().Nodes[refusing.ID].State; st != cluster.StateDown {
		t.Errorf("the leader's map has the stopped node %s", st)
	}
	// Hung: not marked down on the report, but the call waits for the
	// health checks to do it.
	proxy.setHang()
	start = time.Now()
	down, err := asker.Cluster().ConfirmRefused(ctx, tc.Node(3).ID)
	took := time.Since(start)
	if !down || err != nil {
		t.Fatalf("ConfirmRefused of a hung node = %v, %v after %v", down, err, took)
	}
	if took < downAfter/2 {
		t.Errorf("a hung node was marked down after %v, before the health checks could (%v)", took, downAfter)
	}
	t.Logf("stopped node confirmed down at once; hung node after %v", took)
}
