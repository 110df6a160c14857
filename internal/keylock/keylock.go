// Package keylock serialises work on one name, such as an object key: a
// Set holds one lock per name, which exists only while some caller holds
// it or waits for it.
package keylock

import (
	"context"
	"sync"
)

// Set is a set of locks by name. The zero value is ready to use.
type Set struct {
	mu sync.Mutex
	m  map[string]*lock
}

type lock struct {
	held chan struct{} // holds a token while the lock is held
	refs int           // holders and waiters
}

// Lock takes the lock of name and returns the func that releases it.
func (s *Set) Lock(name string) (unlock func()) {
	unlock, _ = s.LockContext(context.Background(), name)
	return unlock
}

// LockContext is Lock giving up, with ctx's error, when ctx ends first.
func (s *Set) LockContext(ctx context.Context, name string) (unlock func(), err error) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*lock)
	}
	l := s.m[name]
	if l == nil {
		l = &lock{held: make(chan struct{}, 1)}
		s.m[name] = l
	}
	l.refs++
	s.mu.Unlock()
	select {
	case l.held <- struct{}{}:
	case <-ctx.Done():
		s.drop(name, l)
		return nil, ctx.Err()
	}
	return func() {
		<-l.held
		s.drop(name, l)
	}, nil
}

// drop forgets a reference to the lock l of name.
func (s *Set) drop(name string, l *lock) {
	s.mu.Lock()
	if l.refs--; l.refs == 0 {
		delete(s.m, name)
	}
	s.mu.Unlock()
}
