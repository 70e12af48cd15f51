package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/telemetry"
)

// PlaceholderSource supplies the placeholder table in force (package
// placeholder's Manager). Its Table is read once per request.
type PlaceholderSource interface {
	Table() *placeholder.Table
}

const (
	bodyTripwire   = "credential not allowed for this host"
	reasonTripwire = telemetry.EventSecretTripwire

	// tripwireBodyScan is how much of a request body the tripwire reads.
	tripwireBodyScan = 64 << 10
)

// tripInfo says which placeholder tripped, where and in which spelling.
type tripInfo struct {
	ref     string
	foundIn string
	form    placeholder.Form
}

// tripState is the exchange's placeholder state.
type tripState struct {
	table *placeholder.Table
	// trip is set once, by the handler goroutine or by the transport's
	// reading a streamed body (hence atomic).
	trip atomic.Pointer[tripInfo]
}

// tripwireError is the read error of a streamed request body in which a
// placeholder turned up: the transport aborts the upstream request and
// classify answers 403.
type tripwireError struct{ ref string }

func (e *tripwireError) Error() string {
	return "request body carries the placeholder of secret " + e.ref + ", which this host may not receive"
}

// tripHead is the tripwire over what a request shows before its body: the
// host name, the method, the URL (path, query, fragment, userinfo; as sent and
// percent-decoded once), every header name and value, and the trailer
// names the request declares (TestTrailerNameCarriesNoPlaceholder). A placeholder is
// accepted in exactly two places, both of which the rule that allowed the
// request replaces whole, so the app's bytes there never reach the
// origin: a header its header_rewrites set from that placeholder's secret
// (rewrite.Set.HeaderAccepts), and a query parameter its query_rewrites
// set from that secret (rewrite.Set.QueryAccepts; the piece's decoded
// name, exactly). Any other placeholder — another header, Cookie, another
// parameter, the path, a header name, the secret's own host included;
// every placeholder when no rule allowed the request, under
// default_action allow, a denial or report mode alike — refuses the
// request with 403 before any upstream work, an ERROR decision line
// (event secret_tripwire) and botbox_secret_tripwire_total. Returns true
// when it answered the request. TestTripwire* and TestPlaceholderOnlyWhere*
// hold it.
func (h *Handler) tripHead(r *http.Request, x *exchange, hp hostport.HostPort, g *generation.Generation, d policy.Decision) bool {
	if h.placeholders == nil {
		return false
	}
	t := h.placeholders.Table()
	if t.Len() == 0 {
		return false
	}
	x.tw.table = t
	var set *rewrite.Set // nil accepts no placeholder anywhere
	if d.Allowed() && d.Rule != nil {
		set = g.Rewrites(d)
	}
	accepts := set.HeaderAccepts
	if c, _ := h.ruleCredential(d); c != nil {
		// The credential replaces these headers whole (the signature
		// the app made with its placeholder key).
		accepts = func(name, ref string) bool { return c.AcceptsPlaceholder(name, ref) || set.HeaderAccepts(name, ref) }
	}
	if ref, found := t.InspectName(hp.Host); found {
		h.tripped(x, tripInfo{ref: ref, foundIn: telemetry.FoundInHost, form: placeholder.FormLiteral}, d)
		return true
	}
	if info, found := findInMethod(t, r.Method); found {
		h.tripped(x, info, d)
		return true
	}
	if info, found := findInHead(t, set, accepts, r.URL, r.Header); found {
		h.tripped(x, info, d)
		return true
	}
	// The names a request declares in its Trailer header (net/http moves
	// them from the header to r.Trailer) are header names too; no rewrite
	// owns them. Their values arrive after the body and are never
	// forwarded (rewrite drops every request trailer).
	if ref, form, found := t.FindHeader(r.Trailer, nil); found {
		h.tripped(x, tripInfo{ref: ref, foundIn: telemetry.FoundInHeader, form: form}, d)
		return true
	}
	return false
}

// findInHead is tripHead's judgement of the URL and the headers under the
// rewrites of the allowing rule (set; nil accepts nothing): the first
// placeholder outside the places set replaces with that placeholder's
// secret. FuzzFindInHead holds that when it finds nothing, the query
// rewrite.Set.ApplyQuery forwards holds no placeholder in any spelling.
//
// accepts judges a header (set.HeaderAccepts, widened by the rule's
// credential).
func findInHead(t *placeholder.Table, set *rewrite.Set, accepts placeholder.HeaderAllowed, target *url.URL, hdr http.Header) (tripInfo, bool) {
	u := *target
	kept, replaced := set.SplitQuery(u.RawQuery)
	u.RawQuery = kept
	if ref, form, found := t.FindURL(&u, nil); found {
		return tripInfo{ref: ref, foundIn: telemetry.FoundInURL, form: form}, true
	}
	for _, p := range replaced {
		if ref, form, found := t.FindEncoded(p.Raw, func(ref string) bool { return set.QueryAccepts(p.Name, ref) }); found {
			return tripInfo{ref: ref, foundIn: telemetry.FoundInURL, form: form}, true
		}
	}
	if ref, form, found := t.FindHeader(hdr, accepts); found {
		return tripInfo{ref: ref, foundIn: telemetry.FoundInHeader, form: form}, true
	}
	return tripInfo{}, false
}

// findInMethod is the tripwire over the request method, which the origin
// receives as written: a token, whose characters a placeholder's are
// (TestPlaceholderInMethodTrips). No rewrite replaces it; a placeholder
// in any case or spelling trips.
func findInMethod(t *placeholder.Table, method string) (tripInfo, bool) {
	if ref, found := t.InspectName(method); found {
		return tripInfo{ref: ref, foundIn: telemetry.FoundInMethod, form: placeholder.FormLiteral}, true
	}
	if ref, form, found := t.FindString(method, nil); found {
		return tripInfo{ref: ref, foundIn: telemetry.FoundInMethod, form: form}, true
	}
	return tripInfo{}, false
}

// tripConnect is the tripwire of a CONNECT request: its target host and
// headers never go upstream, so any placeholder there trips.
func (h *Handler) tripConnect(r *http.Request, x *exchange, hp hostport.HostPort) bool {
	if h.placeholders == nil {
		return false
	}
	t := h.placeholders.Table()
	info := tripInfo{}
	if ref, found := t.InspectName(hp.Host); found {
		info = tripInfo{ref: ref, foundIn: telemetry.FoundInHost, form: placeholder.FormLiteral}
	} else if ref, form, found := t.FindHeader(r.Header, nil); found {
		info = tripInfo{ref: ref, foundIn: telemetry.FoundInHeader, form: form}
	} else {
		return false
	}
	h.tripped(x, info, policy.Decision{})
	return true
}

// tripped refuses the request: 403, counted and logged at ERROR, under the
// host label of the rule that allowed it (d), else _denied.
func (h *Handler) tripped(x *exchange, info tripInfo, d policy.Decision) {
	h.recordTrip(x, info)
	x.hostLabel = telemetry.HostDenied
	if d.Allowed() && d.Rule != nil {
		x.hostLabel = d.Rule.Host
	}
	h.reject(x, http.StatusForbidden, bodyTripwire, telemetry.DecisionDeniedTripwire, reasonTripwire)
}

// recordTrip counts a trip once per exchange. Safe from any goroutine.
func (h *Handler) recordTrip(x *exchange, info tripInfo) {
	if x.tw.trip.CompareAndSwap(nil, &info) {
		h.metrics.SecretTripwire.WithLabelValues(info.ref).Inc()
	}
}

// tripBody runs the tripwire over the first 64 KiB of a body about to be
// forwarded. No placeholder is accepted in a body, the secret's own host
// included: no rewrite replaces a body. A body of known length is read up to that bound before
// anything goes upstream: a trip is a 403 and the origin receives nothing;
// a clean body is forwarded intact (the bytes read first, then the rest).
// A body of unknown length (chunked, an HTTP/2 stream: possibly
// interactive, so never waited for) is scanned as it streams, across read
// boundaries: the read that completes a placeholder fails instead, the
// transport aborts the upstream request (no final chunk, an RST_STREAM) and
// the agent gets 403 if no response has started. The origin may then have
// received the head and the bytes before that read, never the placeholder
// whole (a placeholder split across the agent's writes leaves its first
// part). d is the decision (its rule labels the metrics). It runs before
// the request is counted as forwarded. Returns true when it answered the
// request.
func (h *Handler) tripBody(r *http.Request, x *exchange, d policy.Decision) bool {
	t := x.tw.table
	if t == nil || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	if r.ContentLength < 0 {
		r.Body = &scanningBody{ReadCloser: r.Body, h: h, x: x, keep: t.MaxLen() - 1}
		return false
	}
	if r.ContentLength == 0 {
		return false
	}
	buf := make([]byte, min(r.ContentLength, tripwireBodyScan))
	n, err := io.ReadFull(r.Body, buf)
	buf = buf[:n]
	if ref, form, found := t.Find(buf, nil); found {
		h.tripped(x, tripInfo{ref: ref, foundIn: telemetry.FoundInBody, form: form}, d)
		return true
	}
	r.Body = &peekedBody{ReadCloser: r.Body, head: buf, err: err}
	return false
}

// peekedBody replays the bytes the tripwire read, then the rest of the
// body (or the error that cut the first read).
type peekedBody struct {
	io.ReadCloser
	head []byte
	err  error
}

func (b *peekedBody) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	if b.err != nil {
		if errors.Is(b.err, io.ErrUnexpectedEOF) || b.err == io.EOF {
			return 0, io.ErrUnexpectedEOF
		}
		return 0, b.err
	}
	return b.ReadCloser.Read(p)
}

// scanningBody scans a streamed body's first 64 KiB as the transport reads
// it, keeping the last keep bytes so that a placeholder split across reads
// is found. Read by the transport's goroutine only.
type scanningBody struct {
	io.ReadCloser
	h       *Handler
	x       *exchange
	keep    int
	scanned int64
	tail    []byte
	scratch []byte
}

func (b *scanningBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n == 0 || b.scanned >= tripwireBodyScan {
		return n, err
	}
	// Only the first tripwireBodyScan bytes, as for a body of known length.
	m := int(min(int64(n), tripwireBodyScan-b.scanned))
	b.scratch = append(append(b.scratch[:0], b.tail...), p[:m]...)
	if ref, form, found := b.x.tw.table.Find(b.scratch, nil); found {
		b.h.recordTrip(b.x, tripInfo{ref: ref, foundIn: telemetry.FoundInBody, form: form})
		return 0, &tripwireError{ref: ref}
	}
	b.scanned += int64(m)
	k := min(b.keep, len(b.scratch))
	b.tail = append(b.tail[:0], b.scratch[len(b.scratch)-k:]...)
	return n, err
}

// tripFailure turns an exchange whose streamed body tripped into a
// tripwire refusal: its decision line and botbox_requests_total (counted
// once, from the final decision, in writeDecision) say denied_tripwire.
func (h *Handler) tripFailure(x *exchange, f failure) {
	if f.reason != reasonTripwire {
		return
	}
	x.decision = telemetry.DecisionDeniedTripwire
}

// tripAttrs adds the tripwire fields to a decision line.
func (x *exchange) tripAttrs(attrs []slog.Attr) []slog.Attr {
	info := x.tw.trip.Load()
	if info == nil {
		return attrs
	}
	return append(attrs,
		slog.String(telemetry.KeyEvent, telemetry.EventSecretTripwire),
		slog.Any(telemetry.KeySecretRef, []string{info.ref}),
		slog.String(telemetry.KeyFoundIn, info.foundIn),
		slog.String(telemetry.KeyEncoding, string(info.form)),
	)
}
