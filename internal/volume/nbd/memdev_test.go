package nbd_test

import (
	"context"
	"sync"
)

// memDevice is an in-memory device for protocol tests.
type memDevice struct {
	mu      sync.Mutex
	b       []byte
	flushes int
}

func newMem(size int) *memDevice { return &memDevice{b: make([]byte, size)} }

func (m *memDevice) Size() int64 { return int64(len(m.b)) }
func (m *memDevice) ReadAt(_ context.Context, p []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(p, m.b[off:])
	return nil
}
func (m *memDevice) WriteAt(_ context.Context, p []byte, off int64, _ bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.b[off:], p)
	return nil
}
func (m *memDevice) Flush(context.Context) error {
	m.mu.Lock()
	m.flushes++
	m.mu.Unlock()
	return nil
}
func (m *memDevice) Trim(_ context.Context, off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.b[off : off+n])
	return nil
}
func (m *memDevice) WriteZeroes(ctx context.Context, off, n int64, _, _ bool) error {
	return m.Trim(ctx, off, n)
}
