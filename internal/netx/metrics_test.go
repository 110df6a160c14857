package netx

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	s := startServer(t, "127.0.0.2:0", 0)
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}})
	peer := Peer{ID: "n1", Addrs: []string{s.addr}}
	for i := 0; i < 4; i++ {
		if _, err := get(context.Background(), tr, peer, "/obj"); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(tr, s.ln))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	want := map[string]float64{
		"slipstream_net_client_requests_total{local=127.0.0.5}":     2,
		"slipstream_net_client_requests_total{local=127.0.0.6}":     2,
		"slipstream_net_client_pairs{local=127.0.0.5,state=up}":     1,
		"slipstream_net_client_pairs{local=127.0.0.6,state=down}":   0,
		"slipstream_net_client_errors_total{local=127.0.0.5}":       0,
		"slipstream_net_server_accepted_total{addr=" + s.addr + "}": 2,
		"slipstream_net_client_in_flight{local=127.0.0.6}":          0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for _, k := range []string{
		"slipstream_net_client_received_bytes_total{local=127.0.0.5}",
		"slipstream_net_client_sent_bytes_total{local=127.0.0.6}",
		"slipstream_net_server_sent_bytes_total{addr=" + s.addr + "}",
		"slipstream_net_server_received_bytes_total{addr=" + s.addr + "}",
	} {
		if got[k] == 0 {
			t.Errorf("%s is 0 or missing", k)
		}
	}
}
