package evict

import "container/list"

// LRU evicts the least recently used object.
type LRU struct {
	ll    list.List // front = most recent
	items map[string]*list.Element
	bytes int64
}

type lruItem struct {
	key  string
	size int64
}

var _ Policy = (*LRU)(nil)

// NewLRU returns an empty LRU policy.
func NewLRU() *LRU {
	l := &LRU{items: make(map[string]*list.Element)}
	l.ll.Init()
	return l
}

// Name implements Policy.
func (l *LRU) Name() string { return "lru" }

// Add implements Policy.
func (l *LRU) Add(key string, size int64) {
	if e, ok := l.items[key]; ok {
		it := e.Value.(*lruItem)
		l.bytes += size - it.size
		it.size = size
		l.ll.MoveToFront(e)
		return
	}
	l.items[key] = l.ll.PushFront(&lruItem{key: key, size: size})
	l.bytes += size
}

// Touch implements Policy.
func (l *LRU) Touch(key string) bool {
	e, ok := l.items[key]
	if ok {
		l.ll.MoveToFront(e)
	}
	return ok
}

// Remove implements Policy.
func (l *LRU) Remove(key string) bool {
	e, ok := l.items[key]
	if !ok {
		return false
	}
	l.drop(e)
	return true
}

func (l *LRU) drop(e *list.Element) *lruItem {
	it := e.Value.(*lruItem)
	l.ll.Remove(e)
	delete(l.items, it.key)
	l.bytes -= it.size
	return it
}

// Evict implements Policy.
func (l *LRU) Evict() (string, int64, bool) {
	e := l.ll.Back()
	if e == nil {
		return "", 0, false
	}
	it := l.drop(e)
	return it.key, it.size, true
}

// Contains implements Policy.
func (l *LRU) Contains(key string) bool { _, ok := l.items[key]; return ok }

// Len implements Policy.
func (l *LRU) Len() int { return len(l.items) }

// Bytes implements Policy.
func (l *LRU) Bytes() int64 { return l.bytes }
