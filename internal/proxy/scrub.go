package proxy

// Response scrubbing (package scrub): for a request into which its rule
// injected a secret (or whose rule says scrub_responses: true without
// injecting), with scrub_responses on (the default), every occurrence of
// every secret BotBox holds — of the request's secret snapshot, not only
// the injected ones, and any run of 12 or more of a secret's characters —
// in the response — status reason, headers, 1xx headers, trailers, body,
// WebSocket frames from the server — reaches the agent masked. This file
// holds all of it; the pipeline calls in at four points: forward (is the
// request scrubbed: scrubOn), rewrite (prepareScrub: the matcher,
// Accept-Encoding, Range, the WebSocket offer), upstreamResponse
// (scrubResponse) and countingWriter.WriteHeader (1xx heads).

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/scrub"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/telemetry"
)

const (
	bodyUninspectable   = "response could not be inspected"
	reasonUninspectable = "response_uninspectable"
	// msgReflection is the message of the WARN line of a masked occurrence.
	msgReflection = "secret reflected in response"
	// msgScrubStall is the message of the WARN line of a stall.
	msgScrubStall = "response paused inside a partial secret match"
	// scrubCacheSize bounds the compiled matchers kept: one per secret
	// snapshot and set of injected tokens (one per credential that mints
	// them), and requests use the current ones (a request that took the
	// previous snapshot just before a rotation may still ask for it).
	scrubCacheSize = 8
)

// uninspectableError is a response BotBox cannot scan for reflected
// secrets (an unknown content coding, a pattern set too large, a WebSocket
// extension it cannot read): the agent gets 502 and never its bytes.
type uninspectableError struct{ why string }

func (e *uninspectableError) Error() string { return "response could not be inspected: " + e.why }

// responseScrub is one request's scrubbing state. Its found callbacks run
// on the goroutine reading the response (the handler's, or ReverseProxy's
// tunnel copier), one at a time for a body, possibly concurrently with the
// trailer mask at EOF for nothing else; mu guards logged anyway.
type responseScrub struct {
	m      *scrub.Matcher
	x      *exchange
	resp   *http.Response // whose trailers Done masks
	body   scrub.Reader   // embedded: no allocation per response
	mu     sync.Mutex
	logged map[[2]string]bool // (secret_ref, where) already logged
	// stallLogged: a stall of this response was logged already.
	stallLogged bool
}

// Found, Done and Stalled make responseScrub the body Reader's
// scrub.Hooks.
func (s *responseScrub) Found(ref string) { s.report(ref, "body") }
func (s *responseScrub) Done()            { s.maskHeader(s.resp.Trailer, "trailer:") }
func (s *responseScrub) Stalled()         { s.stall("body") }

// prepareScrub runs in rewrite, after the header rewrites succeeded: it
// gets the matcher of every secret of the request's snapshot, asks the
// origin for an uncompressed, whole response (no Range, no If-Range: a
// 206 piece is never scrubbed alone, TestScrubDropsRange) and a WebSocket
// without permessage-deflate. A pattern set it cannot build fails the
// request closed before anything is sent.
func (h *Handler) prepareScrub(x *exchange, out *http.Request) {
	// Every token BotBox minted, whichever rule sent it (a token one
	// origin stored must not be read back through another).
	key := scrubKey{snap: x.secrets}
	if h.credentials != nil {
		key.injected = h.credentials.Injected()
	}
	m, err := h.scrubs.Get(key, scrubSecrets)
	if err != nil {
		x.rewriteErr = &uninspectableError{why: err.Error()}
		return
	}
	if m == nil {
		return // BotBox holds no secret
	}
	x.scrubState = responseScrub{m: m, x: x}
	x.scrub = &x.scrubState
	// Direct map access: the keys are canonical, and this runs per request.
	out.Header["Accept-Encoding"] = []string{"identity"}
	delete(out.Header, "Range")
	delete(out.Header, "If-Range")
	if exts := out.Header["Sec-Websocket-Extensions"]; len(exts) > 0 {
		out.Header.Del("Sec-Websocket-Extensions")
		for _, v := range exts {
			if kept := dropExtension(v, "permessage-deflate"); kept != "" {
				out.Header.Add("Sec-Websocket-Extensions", kept)
			}
		}
	}
}

// scrubKey is what a response matcher is compiled from: the request's
// secret snapshot and the tokens BotBox's credentials minted (an immutable
// set per token generation, credential.Injected; nil for none).
type scrubKey struct {
	snap     *secrets.Snapshot
	injected *credential.Injected
}

// scrubSecrets lists every secret of a snapshot and every injected token
// (a cache miss of prepareScrub).
func scrubSecrets(k scrubKey) []scrub.Secret {
	keys := k.snap.Keys()
	out := make([]scrub.Secret, 0, len(keys))
	for _, key := range keys {
		if v, ok := k.snap.Lookup(key); ok {
			out = append(out, scrub.Secret{Ref: key, Value: v.Reveal()})
		}
	}
	if k.injected != nil {
		for i, t := range k.injected.Values {
			out = append(out, scrub.Secret{Ref: k.injected.Refs[i], Value: t})
		}
	}
	return out
}

// dropExtension removes every offer of extension name from a
// Sec-WebSocket-Extensions value (RFC 6455 §9.1: comma-separated offers,
// each a name and ;-parameters).
func dropExtension(v, name string) string {
	var kept []string
	for offer := range strings.SplitSeq(v, ",") {
		n, _, _ := strings.Cut(offer, ";")
		if strings.EqualFold(strings.TrimSpace(n), name) || strings.TrimSpace(offer) == "" {
			continue
		}
		kept = append(kept, strings.TrimSpace(offer))
	}
	return strings.Join(kept, ", ")
}

// found returns the callback of one place of the response (report).
func (s *responseScrub) found(where string) func(ref string) {
	return func(ref string) { s.report(ref, where) }
}

// report counts an occurrence; the first per (secret_ref, where) of the
// response is logged at WARN.
func (s *responseScrub) report(ref, where string) {
	h := s.x.h
	h.metrics.SecretReflections.WithLabelValues(ref).Inc()
	s.mu.Lock()
	if s.logged == nil {
		s.logged = map[[2]string]bool{}
	}
	first := !s.logged[[2]string{ref, where}]
	s.logged[[2]string{ref, where}] = true
	s.mu.Unlock()
	if first {
		where, _ := bound(where) // a header name is the origin's choice
		h.logger.LogAttrs(s.x.ctx, slog.LevelWarn, msgReflection,
			slog.String(telemetry.KeyRequestID, s.x.id),
			slog.String(telemetry.KeyListener, s.x.listener),
			slog.String(telemetry.KeyHost, s.x.host),
			slog.String(telemetry.KeyRule, s.x.rule),
			slog.String(telemetry.KeySecretRef, ref),
			slog.String(telemetry.KeyWhere, where))
	}
}

// stall counts a stall of the response; the first is logged at WARN
// (no byte of the response: only where it happened).
func (s *responseScrub) stall(where string) {
	h := s.x.h
	h.metrics.SecretScrubStalls.WithLabelValues(where).Inc()
	s.mu.Lock()
	first := !s.stallLogged
	s.stallLogged = true
	s.mu.Unlock()
	if first {
		h.logger.LogAttrs(s.x.ctx, slog.LevelWarn, msgScrubStall,
			slog.String(telemetry.KeyRequestID, s.x.id),
			slog.String(telemetry.KeyListener, s.x.listener),
			slog.String(telemetry.KeyHost, s.x.host),
			slog.String(telemetry.KeyRule, s.x.rule),
			slog.String(telemetry.KeyWhere, where))
	}
}

// maskHeader masks every value of hd in place, and any header name that
// holds an occurrence; where is prefix+name. A header without occurrence
// costs one automaton pass and no allocation.
func (s *responseScrub) maskHeader(hd http.Header, prefix string) {
	var renamed []string
	for k, vv := range hd {
		if s.m.Contains(k) {
			renamed = append(renamed, k)
		}
		for i, v := range vv {
			if s.m.Contains(v) {
				vv[i] = s.m.Mask(v, s.found(prefix+k))
			}
		}
	}
	for _, k := range renamed {
		masked := s.m.Mask(k, s.found(prefix+"header name"))
		hd[masked] = append(hd[masked], hd[k]...)
		delete(hd, k)
	}
}

// scrubResponse masks the status reason and headers of resp and wraps its
// body (decoded first if the origin compressed it) or, for a 101, the
// server side of the tunnel. An error makes ReverseProxy answer through
// upstreamError: 502, nothing of the response sent.
func (s *responseScrub) scrubResponse(resp *http.Response) error {
	if s.m.Contains(resp.Status) {
		// ReverseProxy writes the reason only for a 101 (Response.Write);
		// masked everywhere anyway. The code's digits and the space are
		// masked too only if they belong to an occurrence.
		resp.Status = s.m.Mask(resp.Status, s.found("status"))
	}
	s.maskHeader(resp.Header, "")
	if resp.StatusCode == http.StatusSwitchingProtocols {
		for _, v := range resp.Header.Values("Sec-Websocket-Extensions") {
			if dropExtension(v, "permessage-deflate") != strings.TrimSpace(v) {
				return &uninspectableError{why: "origin accepted permessage-deflate, which was not offered"}
			}
		}
		conn, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			return nil // ReverseProxy refuses it anyway
		}
		resp.Body = &scrubbedConn{ReadWriteCloser: conn, fr: s.m.NewFrameReader(conn, s.found("websocket"), func() { s.stall("websocket") })}
		return nil
	}
	if err := decodeBody(resp); err != nil {
		return err
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	s.resp = resp
	s.body.Reset(s.m, resp.Body, s, scrub.FramingOf(resp.Header.Get("Content-Type")))
	s.body.SetLength(resp.ContentLength)
	resp.Body = &s.body
	return nil
}

// maskInformational masks the headers of a 1xx response (103 Early Hints)
// that ReverseProxy is about to write.
func (s *responseScrub) maskInformational(hd http.Header) { s.maskHeader(hd, "") }

// decodeBody undoes the content codings the origin applied despite
// Accept-Encoding: identity, so that the scrubber sees the bytes: gzip,
// deflate (zlib, or raw as some servers send it), br, zstd, in the reverse
// order of Content-Encoding. The body then goes out decoded, without
// Content-Encoding and Content-Length. Any other coding is an
// uninspectableError. Decoding streams (memory stays bounded whatever the
// ratio). "aws-chunked" is not a coding of a response: it is the framing
// of an S3 upload, which S3-compatible stores (versitygw) keep in the
// object's stored Content-Encoding and send back on GET and HEAD over a
// body that is the object's bytes; it is read as identity
// (TestScrubAWSChunkedIsIdentity, test/s3).
func decodeBody(resp *http.Response) error {
	var codings []string
	for _, v := range resp.Header["Content-Encoding"] {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" && c != "aws-chunked" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return nil
	}
	for _, c := range codings {
		switch c {
		case "gzip", "x-gzip", "deflate", "br", "zstd":
		default:
			return &uninspectableError{why: fmt.Sprintf("content coding %q", c)}
		}
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	body := resp.Body
	var r io.Reader = body
	for i := len(codings) - 1; i >= 0; i-- {
		r = &lazyDecoder{src: r, coding: codings[i]}
	}
	resp.Body = &decodedBody{Reader: r, closer: body}
	return nil
}

// lazyDecoder builds its decoder on the first Read, so that the response
// head is not held until the first compressed bytes arrive.
type lazyDecoder struct {
	src    io.Reader
	coding string
	r      io.Reader
	close  func()
}

func (d *lazyDecoder) Read(p []byte) (int, error) {
	if d.r == nil {
		if err := d.open(); err != nil {
			return 0, err
		}
	}
	return d.r.Read(p)
}

func (d *lazyDecoder) open() error {
	switch d.coding {
	case "gzip", "x-gzip":
		z, err := gzip.NewReader(d.src)
		if err != nil {
			return fmt.Errorf("decoding gzip response: %w", err)
		}
		d.r = z
	case "deflate":
		// RFC 9110 says zlib; some servers send raw deflate.
		br := bufio.NewReader(d.src)
		if b, err := br.Peek(2); err == nil && b[0]&0x0f == 8 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0 {
			z, err := zlib.NewReader(br)
			if err != nil {
				return fmt.Errorf("decoding deflate response: %w", err)
			}
			d.r = z
		} else {
			d.r = flate.NewReader(br)
		}
	case "br":
		d.r = brotli.NewReader(d.src)
	case "zstd":
		// The window is what a stream may make BotBox hold: RFC 9659's
		// 8 MiB for HTTP, not the library's much larger default.
		z, err := zstd.NewReader(d.src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return fmt.Errorf("decoding zstd response: %w", err)
		}
		d.r, d.close = z, z.Close
	}
	return nil
}

// zstdMaxWindow bounds a zstd response's window (RFC 9659: 8 MiB).
const zstdMaxWindow = 8 << 20

// decodedBody closes the origin's body and releases the decoders.
type decodedBody struct {
	io.Reader
	closer io.Closer
}

func (b *decodedBody) Close() error {
	for r := b.Reader; ; {
		d, ok := r.(*lazyDecoder)
		if !ok {
			break
		}
		if d.close != nil {
			d.close()
		}
		r = d.src
	}
	return b.closer.Close()
}

// scrubbedConn is the server side of a scrubbed WebSocket tunnel: reads
// (server to agent) go through the frame scrubber, writes pass.
type scrubbedConn struct {
	io.ReadWriteCloser
	fr *scrub.FrameReader
}

func (c *scrubbedConn) Read(p []byte) (int, error) { return c.fr.Read(p) }

// CloseWrite keeps ReverseProxy's half-close towards the origin.
func (c *scrubbedConn) CloseWrite() error {
	if cw, ok := c.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// isUninspectable reports whether err is an uninspectableError.
func isUninspectable(err error) bool {
	_, ok := errors.AsType[*uninspectableError](err)
	return ok
}
