package keylock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLockSerialisesOneName(t *testing.T) {
	var s Set
	var mu sync.Mutex
	inside := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				unlock := s.Lock("k")
				mu.Lock()
				inside++
				if inside != 1 {
					t.Errorf("%d holders of one name at once", inside)
				}
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				unlock()
			}
		}()
	}
	wg.Wait()
	if len(s.m) != 0 {
		t.Errorf("%d locks left after every holder released", len(s.m))
	}
}

func TestLockContext(t *testing.T) {
	var s Set
	unlock := s.Lock("k")
	other := s.Lock("other") // another name does not wait
	other()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.LockContext(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockContext of a held name: %v, want the deadline", err)
	}
	unlock()
	u, err := s.LockContext(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	u()
	if len(s.m) != 0 {
		t.Errorf("%d locks left, want none (a waiter that gave up is forgotten)", len(s.m))
	}
}
