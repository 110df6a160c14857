package volume

import (
	"context"
	"testing"
	"time"
)

// TestConcurrentFlushWaitsForDurability: a Flush that starts while another
// is syncing does not return success before the writes acknowledged before
// it are durable on every mirror, and does not report success for writes
// the other Flush failed to make durable.
func TestConcurrentFlushWaitsForDurability(t *testing.T) {
	for _, tc := range []struct {
		name      string
		firstFail bool // the mirrors' syncs fail while the first Flush runs
	}{
		{"first flush succeeds", false},
		{"first flush fails", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			nodes := []string{"a", "b"}
			reps := memReps(nodes...)
			gate := make(chan struct{})
			for _, r := range reps {
				r.syncGate, r.syncIn = gate, make(chan struct{}, 1)
			}
			v := openMem(t, "a", t.TempDir(), 4*memCS, nodes, reps, nil)
			if err := v.WriteAt(ctx, []byte("hello"), 0, false); err != nil {
				t.Fatal(err)
			}
			first := make(chan error, 1)
			go func() { first <- v.Flush(ctx) }()
			for _, r := range reps {
				<-r.syncIn // the first Flush is syncing on every mirror
			}
			if tc.firstFail {
				for _, r := range reps {
					r.syncFail.Store(true)
				}
			}
			second := make(chan error, 1)
			go func() { second <- v.Flush(ctx) }() // another connection's
			select {
			case err := <-second:
				t.Fatalf("second Flush returned %v while the first was still syncing", err)
			case <-time.After(200 * time.Millisecond):
			}
			close(gate)
			err1 := <-first
			var err2 error
			select {
			case err2 = <-second:
			case <-time.After(5 * time.Second):
				t.Fatal("second Flush did not return")
			}
			if tc.firstFail {
				if err1 == nil || err2 == nil {
					t.Fatalf("flushes returned %v and %v; want errors, nothing was made durable", err1, err2)
				}
				return
			}
			if err1 != nil || err2 != nil {
				t.Fatalf("flushes returned %v and %v", err1, err2)
			}
			for id, r := range reps {
				if !r.durableHas("vol@1", 0, []byte("hello"), 0) {
					t.Errorf("flushed write not durable on %s", id)
				}
			}
		})
	}
}

// TestFlushFailureKeepsAGoodCopy: a Flush that fails on every mirror
// fails, but leaves the chunk a mirror that is current: once the mirrors
// work again the chunk reads and writes, a retried Flush makes the writes
// durable everywhere, and they survive a restart of the volume.
func TestFlushFailureKeepsAGoodCopy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []string
	}{
		{"two copies", []string{"a", "b"}},
		{"one copy", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			reps := memReps(tc.nodes...)
			dir := t.TempDir()
			v := openMem(t, "a", dir, 4*memCS, tc.nodes, reps, nil)
			if err := v.WriteAt(ctx, []byte("hello"), 0, false); err != nil {
				t.Fatal(err)
			}
			for _, r := range reps {
				r.syncFail.Store(true)
			}
			if err := v.Flush(ctx); err == nil {
				t.Fatal("Flush succeeded although no mirror could sync")
			}
			current := 0
			for _, id := range v.Owners(0) {
				if !v.stale.isStale(id, 0) {
					current++
				}
			}
			if current == 0 {
				t.Errorf("every mirror of chunk 0 is marked stale after the failed Flush")
			}
			for _, r := range reps {
				r.syncFail.Store(false)
			}
			p := make([]byte, 5)
			waitUntil(t, "chunk 0 to read back", func() bool {
				return v.ReadAt(ctx, p, 0) == nil && string(p) == "hello"
			})
			waitUntil(t, "chunk 0 to take writes", func() bool { return v.WriteAt(ctx, []byte("!"), 5, false) == nil })
			waitUntil(t, "a retried Flush to succeed", func() bool { return v.Flush(ctx) == nil })
			waitUntil(t, "the mirrors to be in sync", func() bool { return len(v.StaleChunks()) == 0 })
			for id, r := range reps {
				if !r.durableHas("vol@1", 0, []byte("hello!"), 0) {
					t.Errorf("write not durable on %s after the retried Flush and the resync", id)
				}
			}
			v.Close()
			v2 := openMem(t, "a", dir, 4*memCS, tc.nodes, reps, nil)
			p = make([]byte, 6)
			if err := v2.ReadAt(ctx, p, 0); err != nil || string(p) != "hello!" {
				t.Errorf("after a restart chunk 0 reads %q, %v", p, err)
			}
		})
	}
}

// TestResyncRecoversChunkStaleOnEveryMirror: a chunk marked stale on every
// mirror (as a failed flush used to leave it) is not given up: the resync
// takes the local mirror's copy as current and copies it to the others.
func TestResyncRecoversChunkStaleOnEveryMirror(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []string
	}{
		{"two copies", []string{"a", "b"}},
		{"one copy", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			reps := memReps(tc.nodes...)
			dir := t.TempDir()
			st, err := openStaleStore(dir, "vol@1", 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.nodes {
				st.mark(id, 0)
			}
			if err := st.save(); err != nil {
				t.Fatal(err)
			}
			reps["a"].WriteAt(ctx, "vol@1", 0, 0, []byte("local"), 0, true)
			if r := reps["b"]; r != nil {
				r.WriteAt(ctx, "vol@1", 0, 0, []byte("other"), 0, true)
			}
			v := openMem(t, "a", dir, 4*memCS, tc.nodes, reps, nil)
			waitUntil(t, "the mirrors to be in sync", func() bool { return len(v.StaleChunks()) == 0 })
			p := make([]byte, 5)
			if err := v.ReadAt(ctx, p, 0); err != nil || string(p) != "local" {
				t.Fatalf("chunk 0 reads %q, %v", p, err)
			}
			for id, r := range reps {
				if err := r.ReadAt(ctx, "vol@1", 0, p, 0); err != nil || string(p) != "local" {
					t.Errorf("%s holds %q, %v", id, p, err)
				}
			}
		})
	}
}

// TestMirrorThatMissedASyncIsMarkedStale: a mirror that holds unsynced
// writes and fails (here: loses power) before they are flushed is marked
// stale for those chunks — by the Flush if it is still down then (saved
// and recorded in StaleMarks before the Flush returns), or when it comes
// back if that is first — and so is resynchronised instead of being read
// as current.
func TestMirrorThatMissedASyncIsMarkedStale(t *testing.T) {
	for _, tc := range []struct {
		name       string
		backBefore bool // b is back before the Flush
	}{
		{"down at flush", false},
		{"back before flush", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			nodes := []string{"a", "b"}
			reps := memReps(nodes...)
			a, b := reps["a"], reps["b"]
			dir := t.TempDir()
			mk := &memMarks{}
			v := openMem(t, "b", dir, 4*memCS, nodes, reps, mk)
			if err := v.WriteAt(ctx, []byte("hello"), 0, false); err != nil {
				t.Fatal(err)
			}
			b.down.Store(true) // b loses power and its cache
			b.crash()
			p := make([]byte, 5)
			if err := v.ReadAt(ctx, p, 0); err != nil || string(p) != "hello" { // fails over to a; b is down
				t.Fatalf("read %q, %v", p, err)
			}
			if got := v.Down(); len(got) != 1 || got[0] != "b" {
				t.Fatalf("down %v, want [b]", got)
			}
			if tc.backBefore {
				b.down.Store(false)
				waitUntil(t, "b to be back and in sync", func() bool { return len(v.Down()) == 0 && len(v.StaleChunks()) == 0 })
			}
			if err := v.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if !tc.backBefore {
				st, err := openStaleStore(dir, "vol@1", 4)
				if err != nil {
					t.Fatal(err)
				}
				if !v.stale.isStale("b", 0) || !st.isStale("b", 0) || !mk.isStale("b") {
					t.Errorf("after the Flush b is stale for chunk 0: %v, saved: %v, in StaleMarks: %v; want all true",
						v.stale.isStale("b", 0), st.isStale("b", 0), mk.isStale("b"))
				}
				b.down.Store(false)
				waitUntil(t, "b to be back and in sync", func() bool { return len(v.Down()) == 0 && len(v.StaleChunks()) == 0 })
			}
			a.down.Store(true)
			if err := v.ReadAt(ctx, p, 0); err != nil || string(p) != "hello" {
				t.Errorf("with a down chunk 0 reads %q, %v from b; want the flushed write", p, err)
			}
		})
	}
}
