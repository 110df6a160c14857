package tier_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// Backlog reads the journal's size and the destager's state; write-back
// PUTs and deletes append to the journal and then update the destager's
// state with the journal locked. Both at once must not deadlock.
func TestBacklogConcurrentWithWriteBack(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{NodeID: "n1"}, map[string]tier.Bucket{"bkt": {Mode: tier.ModeWriteback}})
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate }) // keep the backlog non-empty
	defer close(gate)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for g := 0; g < 4; g++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = tr.Backlog()
			}
		}()
	}
	n := 300
	if testing.Short() {
		n = 150
	}
	done := make(chan struct{})
	var writers sync.WaitGroup
	for w := 0; w < 2; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			ctx := context.Background()
			for i := 0; i < n; i++ {
				key := fmt.Sprintf("w%d-k%d", w, i%50)
				var err error
				if i%5 == 4 {
					err = tr.Delete(ctx, "bkt", key)
				} else {
					_, err = tr.Put(ctx, "bkt", key, bytesReader([]byte("x")), object.PutOptions{Size: 1})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { writers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<22)
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "tier.(*journal)") || strings.Contains(g, "Backlog") {
				t.Log(g)
			}
		}
		t.Fatal("write-back PUTs and deletes did not finish beside Backlog calls (lock order)")
	}
	close(stop)
	readers.Wait()
	if bl := tr.Backlog(); bl.Objects == 0 || bl.JournalBytes == 0 {
		t.Errorf("backlog %+v: want pending operations and a journal", bl)
	}
}
