package proxy

// Credential brokering (package credential): a rule's credential:
// authenticates the requests it allows. forward calls prepareCredential
// once the request is admitted (Prepare may read the body, may wait for a
// token); rewrite calls applyCredential as the last change to the
// outbound head (a signature covers the headers as sent).

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
	"github.com/botbox/botbox/internal/credential/awssig"
	"github.com/botbox/botbox/internal/generation"
	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/policy"
	"github.com/botbox/botbox/internal/telemetry"
)

// CredentialSource resolves a rule's credential by name (package
// credential/broker's Broker), and lists the tokens BotBox minted, which
// every scrubbed response is masked for (scrub.go).
type CredentialSource interface {
	Credential(name string) (credential.Credential, bool)
	Injected() *credential.Injected
}

const (
	bodyCredentialRefused     = "request not allowed with this credential"
	bodyCredentialUnavailable = "credential unavailable"
	reasonCredentialRefused   = "credential_refused"
	reasonCredentialMissing   = "credential_unavailable"
)

// ruleCredential returns the credential of the rule that allowed d, or
// nil (no credential, or none configured under that name: Prepare then
// fails closed).
func (h *Handler) ruleCredential(d policy.Decision) (credential.Credential, bool) {
	if !d.Allowed() || d.Rule == nil || d.Rule.Credential == "" {
		return nil, false
	}
	if h.credentials == nil {
		return nil, true
	}
	c, _ := h.credentials.Credential(d.Rule.Credential)
	return c, true
}

// prepareCredential runs the credential's Prepare for an allowed request
// whose rule names one. It answers the request itself on failure and
// returns false.
func (h *Handler) prepareCredential(r *http.Request, x *exchange, d policy.Decision, cleartext bool, maxBody int64) bool {
	c, named := h.ruleCredential(d)
	if !named {
		return true
	}
	x.credential = d.Rule.Credential
	x.hostLabel = d.Rule.Host
	if c == nil {
		h.reject(x, http.StatusServiceUnavailable, bodyCredentialUnavailable, telemetry.DecisionDeniedCredential, reasonCredentialMissing)
		return false
	}
	req := credential.Request{In: r, Host: d.Rule.Host, Cleartext: cleartext, MaxBody: maxBody, Secrets: x.secrets}
	if h.placeholders != nil {
		req.Placeholders = h.placeholders.Table()
	}
	p, err := c.Prepare(x.ctx, &req)
	if err == nil {
		x.credPrep = p
		return true
	}
	x.errText = err.Error()
	if unavailable, ok := errors.AsType[*credential.UnavailableError](err); ok {
		secs := max(1, int64((unavailable.RetryAfter+time.Second-1)/time.Second))
		x.cw.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		h.reject(x, http.StatusServiceUnavailable, bodyCredentialUnavailable, telemetry.DecisionDeniedCredential, reasonCredentialMissing)
		return false
	}
	switch {
	case isType[*credential.RefusedError](err):
		h.reject(x, http.StatusForbidden, bodyCredentialRefused, telemetry.DecisionDeniedCredential, reasonCredentialRefused)
	case isType[*credential.BodyTooLargeError](err):
		h.reject(x, http.StatusRequestEntityTooLarge, bodyBodyTooLarge, telemetry.DecisionDeniedBodyTooLarge, reasonBodyTooLarge)
	case isType[*credential.MissingSecretError](err):
		h.reject(x, http.StatusInternalServerError, bodySecretMissing, telemetry.DecisionDeniedCredential, reasonSecretMissing)
	default:
		// A body read failed: the limit, the tripwire or the agent.
		f := classify(x.ctx, err)
		if f.status == 0 {
			x.decision, x.reason = telemetry.DecisionAllow, f.reason
			h.abort(x, f.reason, err)
			return false
		}
		decision := telemetry.DecisionDeniedCredential
		switch f.reason {
		case reasonBodyTooLarge:
			decision = telemetry.DecisionDeniedBodyTooLarge
		case reasonTripwire:
			decision = telemetry.DecisionDeniedTripwire
		}
		h.reject(x, f.status, f.body, decision, f.reason)
	}
	return false
}

// admitCopySource judges an S3 copy's source — X-Amz-Copy-Source, the
// object the origin reads with the credential's key — as a GET of it on
// the same host (awssig.CopySourcePath): the rule that allowed the
// request must allow that GET too (its routes), and a virtual-hosted
// bucket host copies only from its own bucket. Otherwise the agent could
// have BotBox sign a copy out of another bucket, or a prefix the routes
// keep from it, into a place it may read (TestAttackS3CopySourceOutsideTheRule).
// It answers a refusal itself (403 credential_refused) and returns false.
func (h *Handler) admitCopySource(r *http.Request, x *exchange, hp hostport.HostPort, g *generation.Generation, d policy.Decision) bool {
	c, _ := h.ruleCredential(d)
	if c == nil || c.Type() != config.CredentialAWSSigV4 {
		return true
	}
	var sources []string
	for k, v := range r.Header {
		if strings.EqualFold(k, "X-Amz-Copy-Source") {
			sources = append(sources, v...)
		}
	}
	if len(sources) == 0 {
		return true
	}
	ok := len(sources) == 1
	if ok {
		var p string
		if p, ok = awssig.CopySourcePath(hp.Host, sources[0]); ok {
			src := g.Policy.Decide(policy.Target{Host: hp, Method: http.MethodGet, Path: p})
			ok = src.Allowed() && src.Rule == d.Rule
		}
	}
	if !ok {
		x.credential, x.hostLabel = d.Rule.Credential, d.Rule.Host
		x.errText = "X-Amz-Copy-Source names an object the rule does not allow reading"
		h.reject(x, http.StatusForbidden, bodyCredentialRefused, telemetry.DecisionDeniedCredential, reasonCredentialRefused)
	}
	return ok
}

// isType reports whether err wraps an E.
func isType[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}

// applyCredential authenticates the outbound request (rewrite's last
// step). An error refuses it in guardedTransport: nothing is sent.
func (x *exchange) applyCredential(out *http.Request) {
	if x.credPrep == nil || x.rewriteErr != nil {
		return
	}
	if err := x.credPrep.Apply(x.ctx, out); err != nil {
		x.rewriteErr = err
	}
}
