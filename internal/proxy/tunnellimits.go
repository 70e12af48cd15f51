package proxy

import (
	"errors"
	"time"

	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
)

// Reasons of the tunnel limits and of a reload's re-decision.
const (
	// reasonPolicyReloaded: a reload's policy no longer allows the open
	// tunnel's host, port or route; BotBox closed it.
	reasonPolicyReloaded = "policy_reloaded"
)

// tunnelTarget is what an open tunnel is re-decided on when the policy
// changes: a CONNECT tunnel on its host and port (DecideConnection, as
// when it was opened), an upgrade tunnel on the request that opened it
// (Decide: host, port, method and route).
type tunnelTarget struct {
	connect bool
	host    hostport.HostPort
	method  string
	path    string // escaped path of the upgrade request
}

// decide decides t under generation g.
func (t tunnelTarget) decide(g *generation.Generation) policy.Decision {
	if t.connect {
		return g.Policy.DecideConnection(t.host)
	}
	return g.Policy.Decide(policy.Target{Host: t.host, Method: t.method, Path: t.path})
}

// tunnelLimits are the limits of the rule that allowed an upgrade tunnel,
// applied to what the agent sends through it after the upgrade:
//   - maxBytes (max_request_body_bytes): every byte the agent sends after
//     the upgrade response, WebSocket frame headers included, counts; the
//     read that crosses the limit is dropped and the tunnel closed, the
//     line says denied_body_too_large;
//   - rate (rate_limit): each WebSocket frame the agent sends (data,
//     continuation or control) takes one token from the rule's bucket,
//     the one its HTTP requests take from; when the bucket is empty the
//     frame waits until a token is there (the tunnel is slowed to the
//     rate, never corrupted by a dropped frame).
//
// report: the generation is in report mode: nothing is closed or slowed,
// and the line says report_deny with the limit's reason.
type tunnelLimits struct {
	maxBytes int64
	rate     *generation.Bucket
	report   bool
}

// newTunnelLimits is the tunnel's share of l under g; nil when it has none.
func newTunnelLimits(g *generation.Generation, l *generation.Limits) *tunnelLimits {
	if l == nil || (l.MaxBodyBytes == 0 && l.Rate == nil) {
		return nil
	}
	return &tunnelLimits{maxBytes: l.MaxBodyBytes, rate: l.Rate, report: g.Report}
}

// errTunnelBodyTooLarge fails the agent's read that crossed the limit.
var errTunnelBodyTooLarge = errors.New("bytes sent through the tunnel exceed max_request_body_bytes")

// errTunnelClosed ends a read waiting for a rate-limit token when the
// tunnel is closed.
var errTunnelClosed = errors.New("tunnel closed")

// admit applies the tunnel's limits to p, the bytes just read from the
// agent (already counted in t.in). It returns an error when p must not be
// forwarded.
func (t *tunnelConn) admit(p []byte) error {
	l := t.limits.Load()
	if l == nil {
		return nil
	}
	if l.maxBytes > 0 && t.in.Load() > l.maxBytes {
		if l.report {
			t.markReport(reasonBodyTooLarge)
		} else {
			t.closeWith(reasonBodyTooLarge)
			return errTunnelBodyTooLarge
		}
	}
	if l.rate == nil {
		return nil
	}
	for range t.frames.feed(p) {
		for {
			ok, wait := l.rate.Take(t.now())
			if ok {
				break
			}
			if l.report {
				t.markReport(reasonRateLimited)
				break
			}
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-t.done:
				timer.Stop()
				return errTunnelClosed
			}
		}
	}
	return nil
}

// markReport records, once, the limit report mode did not apply.
func (t *tunnelConn) markReport(reason string) {
	t.reportReason.CompareAndSwap(nil, &reason)
}

// reportedBy is the limit report mode let pass, "" if none.
func (t *tunnelConn) reportedBy() string {
	if r := t.reportReason.Load(); r != nil {
		return *r
	}
	return ""
}

// redecide re-decides the tunnel under g: revoked when g enforces and no
// longer allows it (the caller closes it), else its limits follow g.
func (t *tunnelConn) redecide(g *generation.Generation) (revoked bool) {
	d := t.target.decide(g)
	if !d.Allowed() && !g.Report {
		return true
	}
	if !t.target.connect {
		var l *generation.Limits
		if d.Allowed() {
			l = g.Limits(d)
		}
		t.limits.Store(newTunnelLimits(g, l))
	}
	return false
}

// recheckTunnel re-decides t, just registered, when a reload put another
// generation in force since its request was decided with decided: a reload
// whose CloseRevokedTunnels ran before t was registered (an upgrade whose
// 101 arrived after the swap) still closes it. Registration comes first,
// so every tunnel is re-decided by one or the other
// (TestTunnelOpenedAcrossReload).
func (h *Handler) recheckTunnel(t *tunnelConn, decided *generation.Generation) {
	g := h.gen.Load()
	if g == decided || decided == nil {
		return
	}
	if t.redecide(g) {
		t.closeWith(reasonPolicyReloaded)
	}
}

// CloseRevokedTunnels re-decides every open tunnel under g, the generation
// just put in force: a tunnel g no longer allows (a CONNECT tunnel's host
// or port, an upgrade tunnel's host, port or route) is closed, and its
// decision line, written as it ends, says reason policy_reloaded. In report
// mode nothing is closed. The limits of the tunnels that stay follow g.
// It returns the number of tunnels closed (TestReloadClosesRevokedTunnels).
func (h *Handler) CloseRevokedTunnels(g *generation.Generation) int {
	h.tunnels.mu.Lock()
	open := make([]*tunnelConn, 0, len(h.tunnels.m))
	for t := range h.tunnels.m {
		open = append(open, t)
	}
	h.tunnels.mu.Unlock()
	// Every revoked tunnel gets its reason before any is closed: closing a
	// WebSocket inside a CONNECT tunnel closes that tunnel's connection
	// too, and its line must still say why.
	revoked := make([]*tunnelConn, 0, len(open))
	for _, t := range open {
		if t.redecide(g) {
			reason := reasonPolicyReloaded
			t.reason.CompareAndSwap(nil, &reason)
			revoked = append(revoked, t)
		}
	}
	for _, t := range revoked {
		_ = t.Close()
	}
	return len(revoked)
}

// wsFrameCounter follows the WebSocket frames of one direction (RFC 6455
// §5.2) across reads, to count the frames that start. It only reads the
// header lengths: payloads are skipped, never interpreted. A stream that
// is not WebSocket is still cut into "frames" by the same rules, so every
// byte belongs to some frame and the count cannot be avoided.
type wsFrameCounter struct {
	hdr    [14]byte
	hlen   int    // header bytes collected of the current frame
	remain uint64 // payload bytes left of the current frame
}

// feed consumes p and returns the number of frames whose first byte is in p.
func (c *wsFrameCounter) feed(p []byte) int {
	frames := 0
	for len(p) > 0 {
		if c.hlen == 0 && c.remain > 0 {
			n := uint64(len(p))
			if n > c.remain {
				n = c.remain
			}
			c.remain -= n
			p = p[n:]
			continue
		}
		if c.hlen == 0 {
			frames++
		}
		c.hdr[c.hlen] = p[0]
		c.hlen++
		p = p[1:]
		if need := c.headerLen(); need > 0 && c.hlen == need {
			c.remain = c.payloadLen()
			c.hlen = 0
		}
	}
	return frames
}

// headerLen is the length of the current frame's header, 0 while its
// second byte is not known yet.
func (c *wsFrameCounter) headerLen() int {
	if c.hlen < 2 {
		return 0
	}
	n := 2
	switch c.hdr[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if c.hdr[1]&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// payloadLen is the payload length of a complete header.
func (c *wsFrameCounter) payloadLen() uint64 {
	switch l := c.hdr[1] & 0x7f; l {
	case 126:
		return uint64(c.hdr[2])<<8 | uint64(c.hdr[3])
	case 127:
		var n uint64
		for _, b := range c.hdr[2:10] {
			n = n<<8 | uint64(b)
		}
		return n
	default:
		return uint64(l)
	}
}
