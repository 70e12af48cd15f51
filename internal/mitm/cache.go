package mitm

import (
	"container/list"
	"sync"
	"time"
)

// lru is a bounded least-recently-used cache whose entries also expire. An
// entry is fresh while both hold:
//
//   - now - inserted < ttl (measured from insertion on the monotonic clock;
//     a hit refreshes recency, never the expiry — reference §4.5);
//   - now < staleAt, a wall-clock deadline the caller derives from the value
//     (for leaves: NotAfter minus a safety margin), so that nothing close to
//     its real end of life is handed out whatever the TTL says.
//
// Expired entries are dropped when looked up, or pushed out by capacity.
// It is ~80 lines of container/list instead of a dependency (style.md §3.10).
type lru[V any] struct {
	mu       sync.Mutex
	capacity int
	ttl      time.Duration
	ll       *list.List // front = most recently used; elements hold *entry[V]
	items    map[string]*list.Element
}

type entry[V any] struct {
	key      string
	val      V
	inserted time.Time
	staleAt  time.Time
}

// newLRU returns a cache of at most capacity entries living ttl each. With
// capacity <= 0 or ttl <= 0 the cache stores nothing (a zero
// cert_cache_ttl_seconds means "never hit" in the reference).
func newLRU[V any](capacity int, ttl time.Duration) *lru[V] {
	return &lru[V]{
		capacity: capacity,
		ttl:      ttl,
		ll:       list.New(),
		items:    make(map[string]*list.Element),
	}
}

// get returns the fresh value for key and marks it most recently used. A
// stale entry is removed.
func (c *lru[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*entry[V])
	if now.Sub(e.inserted) >= c.ttl || !now.Before(e.staleAt) {
		c.remove(el)
		return zero, false
	}
	c.ll.MoveToFront(el)
	return e.val, true
}

// add stores val under key as of now, replacing any previous value, and
// evicts the least recently used entry beyond capacity.
func (c *lru[V]) add(key string, val V, now, staleAt time.Time) {
	if c.capacity <= 0 || c.ttl <= 0 || !now.Before(staleAt) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*entry[V])
		e.val, e.inserted, e.staleAt = val, now, staleAt
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&entry[V]{key: key, val: val, inserted: now, staleAt: staleAt})
	for c.ll.Len() > c.capacity {
		c.remove(c.ll.Back())
	}
}

// len returns the number of entries, fresh or not.
func (c *lru[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

func (c *lru[V]) remove(el *list.Element) {
	c.ll.Remove(el)
	delete(c.items, el.Value.(*entry[V]).key)
}
