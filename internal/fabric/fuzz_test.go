package fabric

import (
	"context"
	"testing"
	"time"
)

// FuzzLoadTopology varies the topology files (opensm-subnet.lst,
// ibnetdiscover.out or neighbors, with guid2lid) that go through the
// builder (cabling, LIDs, port counts, LMC); FuzzLoadLFT varies the LFT
// dump. Any topology text must load or fail cleanly, and a loaded model
// must analyse, route and select, promptly and without panicking.
func FuzzLoadTopology(f *testing.F) {
	for _, k := range []string{FileSubnet, FileIBNetDiscover, FileNeighbors} {
		f.Add(k, sampleText(f, k), sampleText(f, FileGUID2LID))
	}
	lfts := sampleText(f, FileLFTs)
	f.Fuzz(func(t *testing.T, kind string, topo, g2l string) {
		switch kind {
		case FileSubnet, FileIBNetDiscover, FileNeighbors:
		default:
			return
		}
		if len(topo) > 1<<16 || len(g2l) > 1<<16 {
			return
		}
		stage := make(chan string, 8)
		done := make(chan error, 1)
		go func() {
			done <- func() error {
				stage <- "load"
				m, err := loadMem(map[string]string{kind: topo, FileLFTs: lfts, FileGUID2LID: g2l})
				if err != nil {
					return nil
				}
				stage <- "analyze"
				a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
				if err != nil {
					return err
				}
				stage <- "routes"
				for _, h := range m.HostNames() {
					if _, err := m.Routes(h, "node0001", a); err != nil {
						break
					}
				}
				if len(m.Hosts) >= 2 {
					stage <- "select"
					if _, err := m.SelectWith(context.Background(), SelectRequest{K: 2, RandomTrials: 2}); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
		last := ""
		timeout := time.After(5 * time.Second)
		for {
			select {
			case s := <-stage:
				last = s
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				return
			case <-timeout:
				t.Fatalf("stuck in %s for 5 s (topology %d bytes, guid2lid %d bytes)", last, len(topo), len(g2l))
			}
		}
	})
}
