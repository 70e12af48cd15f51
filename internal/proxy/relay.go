package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"

	"github.com/botbox/botbox/internal/engine"
	"github.com/botbox/botbox/internal/telemetry"
	"golang.org/x/net/http/httpguts"
)

// relay hands an allowed request (r carries the exchange in its context)
// to the reverse proxy of its server: httputil.ReverseProxy on net/http,
// relayEngine on BotBox's engine.
func (h *Handler) relay(x *exchange, r *http.Request) {
	if x.engine == telemetry.EngineBotBox {
		h.relayEngine(&x.cw, r, x)
		return
	}
	h.rp.ServeHTTP(&x.cw, r)
}

// interimRelay writes the 1xx heads of the origin to the agent for
// relayEngine. A transport may report a 1xx on a goroutine of its own
// (net/http's does); none is written once the round trip returned, as in
// ReverseProxy.
type interimRelay struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	done bool
}

func (r *interimRelay) relay(code int, header textproto.MIMEHeader) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	wh := r.w.Header()
	addValues(wh, http.Header(header))
	r.w.WriteHeader(code)
	clear(wh)
	return nil
}

func (r *interimRelay) end() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
}

// clientWatcher is the engine's response writer: it watches the agent's
// connection while a stream is relayed (engine.response.WatchClient).
type clientWatcher interface{ WatchClient() (stop func()) }

// headerAdopter is the engine's response writer: it takes the origin's
// header map as its own (engine.response.AdoptHeader).
type headerAdopter interface{ AdoptHeader(http.Header) }

// relayEngine is what httputil.ReverseProxy.ServeHTTP does for this
// pipeline (Rewrite, the transport, ModifyResponse, ErrorHandler, the body
// copy), for a request the engine serves, without its copies: the request
// is the engine's own, so its header map is modified in place and sent
// (ReverseProxy clones it), the origin's header map becomes the
// response's (ReverseProxy copies it field by field), and the round trip
// is the synchronous pool's (no goroutine). Everything the pipeline's
// callbacks see is what ReverseProxy shows them: hop-by-hop fields
// removed before Rewrite (so nothing the agent names in Connection can
// strip what Rewrite adds), Forwarded and X-Forwarded-* removed, the
// query cleaned of unparsable parameters, an absent User-Agent kept
// absent, the same 1xx relaying, hop-by-hop fields removed from the
// response, trailers announced and copied the same way, and a body copy
// error aborts the response (http.ErrAbortHandler) after the exchange
// recorded it. TestEngineMatchesReverseProxy holds the equivalence.
//
// Every body write is flushed: a small response (head and body) still
// leaves in one write, a stream reaches the agent as it arrives, and a
// large body's writes bypass the buffer.
func (h *Handler) relayEngine(w http.ResponseWriter, in *http.Request, x *exchange) {
	out := new(http.Request)
	*out = *in
	u := *in.URL
	out.URL = &u
	if in.ContentLength == 0 {
		out.Body = nil
	}
	out.Close = false
	hdr := out.Header
	te := httpguts.HeaderValuesContainsToken(hdr["Te"], "trailers")
	removeHopByHop(hdr)
	if te {
		hdr.Set("Te", "trailers")
	}
	for _, k := range [...]string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		delete(hdr, k)
	}
	out.URL.RawQuery = cleanQueryParams(out.URL.RawQuery)
	h.rewrite(in, out)
	if _, ok := hdr["User-Agent"]; !ok {
		// Absent stays absent: the request writer adds Go's own unless
		// the field is present, and writes none for an empty one.
		hdr["User-Agent"] = []string{""}
	}
	// The transport may call Got1xxResponse on a goroutine of its own,
	// and still do so after RoundTrip returned (its context cancelled
	// amid an origin's stream of 1xx): interimRelay writes none after end,
	// so the response writer is then this goroutine's alone
	// (ReverseProxy's roundTripDone; TestAttackInformationalFloodThenClose).
	x.interim.w = w
	x.trace.Got1xxResponse = x.interim.relay
	res, err := h.engineTransport.RoundTrip(out)
	x.interim.end()
	if err != nil {
		h.upstreamError(w, out, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// The engine serves no upgrade offer (package engine hands those
		// to net/http): a switch is the origin's alone, refused as
		// httputil.ReverseProxy refuses it (502), its Upgrade value not
		// quoted (the origin's bytes never reach the decision line).
		_ = h.upstreamResponse(res)
		_ = res.Body.Close()
		h.upstreamError(w, out, errOriginSwitched)
		return
	}
	removeHopByHop(res.Header)
	if err := h.upstreamResponse(res); err != nil {
		_ = res.Body.Close()
		h.upstreamError(w, out, err)
		return
	}
	if a, ok := unwrapTo[headerAdopter](w); ok {
		a.AdoptHeader(res.Header)
	} else {
		addValues(w.Header(), res.Header)
	}
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for k := range res.Trailer {
			names = append(names, k)
		}
		w.Header().Add("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if res.ContentLength < 0 {
		// A stream: it may stay silent for long, and the agent may leave
		// meanwhile (TestClientClosedMidBody). The engine watches only
		// once the request body was read to its end, chunked or not (the
		// watch reads the agent's connection;
		// TestAttackAbandonedStreamAfterBody).
		if cw, ok := unwrapTo[clientWatcher](w); ok {
			defer cw.WatchClient()()
		}
	}
	if err := h.copyFlushing(w, res.Body, res.ContentLength); err != nil {
		_ = res.Body.Close()
		panic(http.ErrAbortHandler)
	}
	_ = res.Body.Close() // now, to populate res.Trailer
	if len(res.Trailer) == 0 {
		return
	}
	wh := w.Header()
	for k, vv := range res.Trailer {
		if len(res.Trailer) != announced {
			k = http.TrailerPrefix + k
		}
		wh[k] = append(wh[k], vv...)
	}
}

// addValues appends every value of src to dst, field by field
// (httputil.ReverseProxy's copyHeader).
func addValues(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append(dst[k], vv...)
	}
}

// errOriginSwitched: an origin answered 101 to a request that offered no
// upgrade.
var errOriginSwitched = errors.New("proxy: the origin switched protocols though the request offered no upgrade")

// copyFlushing copies the origin's body (of length, -1 when unknown) to
// the agent with a pooled buffer, flushing after every write but the one
// that completes a body of known length: the engine flushes that after
// the handler returned, with the decision line written, so a small
// response still leaves in one write and a client that has read its
// response finds its line logged, as on net/http. It returns the first
// read error other than io.EOF or the first write error (both already
// recorded on the exchange by upstreamBody and countingWriter).
func (h *Handler) copyFlushing(w http.ResponseWriter, body io.Reader, length int64) error {
	buf := h.bufs.Get()
	defer h.bufs.Put(buf)
	// The first FlushError down the writer chain (the server's write
	// deadline wrapper), as http.ResponseController finds it, without
	// allocating one.
	flush := func() error { return nil }
	if f, ok := unwrapTo[interface{ FlushError() error }](w); ok {
		flush = f.FlushError
	}
	var written int64
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			written += int64(n)
			if length < 0 || written < length {
				if ferr := flush(); ferr != nil {
					return ferr
				}
			}
		}
		switch {
		case rerr == io.EOF:
			return nil
		case rerr != nil:
			return rerr
		}
	}
}

// removeHopByHop removes the fields named in Connection and the
// hop-by-hop fields (httputil.ReverseProxy's list and order).
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, f := range hopHeaders {
		delete(h, f)
	}
}

var hopHeaders = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// maxQueryParams is httputil's bound on the parameters a query keeps
// unchanged (its defaultMaxParams).
const maxQueryParams = 10000

// cleanQueryParams is httputil.ReverseProxy's: a query with a semicolon,
// a bad percent escape or too many parameters is re-encoded from what
// url.ParseQuery accepts; any other query is forwarded as it is.
func cleanQueryParams(s string) string {
	reencode := func(s string) string {
		v, _ := url.ParseQuery(s)
		return v.Encode()
	}
	if strings.Count(s, "&")+1 > maxQueryParams {
		return reencode(s)
	}
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			return reencode(s)
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return reencode(s)
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// unwrapTo finds a T in w's chain of Unwrap methods.
func unwrapTo[T any](w http.ResponseWriter) (T, bool) {
	for {
		if t, ok := w.(T); ok {
			return t, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			var zero T
			return zero, false
		}
		w = u.Unwrap()
	}
}

// engineName is the decision line's engine for a request context.
func engineName(r *http.Request) string {
	if engine.Serving(r.Context()) {
		return telemetry.EngineBotBox
	}
	return telemetry.EngineNetHTTP
}
