package listener

import (
	"net"
	"net/http"
	"sync"
)

// IdlePool is the connection budget of the admin port. Unlike ConnLimit it
// does not refuse a new connection when full: it closes the connection that
// has waited longest without a request in progress (one that never sent a
// request, or an idle keep-alive) and admits the new one. An app flooding
// the port with idle connections therefore only evicts its own, and a
// probe, which sends its request as soon as it connects, still gets an
// answer (TestIdlePoolEvictsOldestIdle). Only when every admitted
// connection has a request in progress is the new one refused.
//
// Connection states come from http.Server.ConnState: install ConnState as
// (or call it from) that hook. Drops and evictions are both reported
// through DropOptions.
type IdlePool struct {
	max   int
	drops *dropReporter

	mu    sync.Mutex
	seq   uint64
	conns map[*poolConn]struct{}
}

// NewIdlePool returns a pool of at most n connections (n >= 1).
func NewIdlePool(n int, o DropOptions) *IdlePool {
	return &IdlePool{max: max(n, 1), drops: newDropReporter(o), conns: make(map[*poolConn]struct{})}
}

// Len reports how many connections are admitted.
func (p *IdlePool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Listener wraps ln with the pool.
func (p *IdlePool) Listener(ln net.Listener) net.Listener {
	return &poolListener{Listener: ln, pool: p}
}

// ConnState tracks whether a connection has a request in progress.
func (p *IdlePool) ConnState(c net.Conn, s http.ConnState) {
	pc, ok := c.(*poolConn)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case http.StateActive, http.StateHijacked:
		pc.active = true
	case http.StateIdle:
		p.seq++
		pc.active, pc.idleSeq = false, p.seq
	}
}

// admit adds c, evicting the longest-idle connection when full; it returns
// the evicted connection (to close outside the lock) or ok=false when every
// admitted connection is active.
func (p *IdlePool) admit(c net.Conn) (pc, victim *poolConn, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) >= p.max {
		for v := range p.conns {
			if !v.active && (victim == nil || v.idleSeq < victim.idleSeq) {
				victim = v
			}
		}
		if victim == nil {
			return nil, nil, false
		}
		delete(p.conns, victim)
	}
	p.seq++
	pc = &poolConn{Conn: c, pool: p, idleSeq: p.seq}
	p.conns[pc] = struct{}{}
	return pc, victim, true
}

func (p *IdlePool) remove(pc *poolConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

type poolListener struct {
	net.Listener
	pool *IdlePool
}

func (l *poolListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		pc, victim, ok := l.pool.admit(c)
		if victim != nil {
			l.pool.drops.drop(victim.RemoteAddr())
			_ = victim.Close()
		}
		if ok {
			return pc, nil
		}
		l.pool.drops.drop(c.RemoteAddr())
		_ = c.Close()
	}
}

// poolConn is one admitted connection; active and idleSeq are guarded by
// the pool's mutex.
type poolConn struct {
	net.Conn
	pool    *IdlePool
	once    sync.Once
	active  bool
	idleSeq uint64 // order in which connections became idle (or were admitted)
}

func (c *poolConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.pool.remove(c) })
	return err
}
