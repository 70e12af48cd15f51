package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
)

// explainCredentials stands in for the credential broker in `explain`:
// no key is read and nothing is signed or minted, so a rule's credential
// lets the request through to the recording transport, and
// printCredential says what the real one does. Names and refs only.
// A credential whose key file is missing fails as the real one does
// (500 secret_missing, nothing forwarded).
type explainCredentials struct {
	cfg     *config.Config
	missing map[string]string
}

func (c explainCredentials) Credential(name string) (credential.Credential, bool) {
	cr := c.cfg.Credential(name)
	if cr == nil {
		return nil, false
	}
	return explainCredential{cr, c.missing}, true
}

func (explainCredentials) Injected() *credential.Injected { return nil }

type explainCredential struct {
	c       *config.Credential
	missing map[string]string
}

func (e explainCredential) Name() string                             { return e.c.Name }
func (e explainCredential) Type() string                             { return e.c.Type }
func (explainCredential) AcceptsPlaceholder(string, string) bool     { return false }
func (explainCredential) Apply(context.Context, *http.Request) error { return nil }
func (explainCredential) Injected() *credential.Injected             { return nil }
func (e explainCredential) Prepare(context.Context, *credential.Request) (credential.Prepared, error) {
	for _, ref := range e.c.SecretRefs() {
		if _, gone := e.missing[ref]; gone {
			return nil, &credential.MissingSecretError{Credential: e.c.Name, Ref: ref}
		}
	}
	return e, nil
}

// printCredential says what the rule's credential does to the request,
// naming the credential and its secret refs, never a value.
func (e *explainer) printCredential(w io.Writer, rule *config.Rule) {
	if rule == nil || rule.Credential == "" {
		return
	}
	c := e.cfg.Credential(rule.Credential)
	if c == nil {
		return
	}
	switch c.Type {
	case config.CredentialAWSSigV4:
		service, _ := config.AWSService(c.Service, rule.Host)
		fmt.Fprintf(w, "credential: %s (aws_sigv4): the app's Authorization, X-Amz-Date, X-Amz-Security-Token and X-Amz-Content-Sha256 are removed and the request is re-signed (region %s, service %s) with the keys from %s; a request signed with another key than the placeholder is refused (403)\n",
			c.Name, c.Region, service, strings.Join(c.SecretRefs(), ", "))
	default:
		fmt.Fprintf(w, "credential: %s (%s): Authorization: Bearer with a token BotBox mints from %s (the app's Authorization is replaced)\n",
			c.Name, c.Type, strings.Join(c.SecretRefs(), ", "))
	}
	for _, ref := range c.SecretRefs() {
		if p, ok := e.missing[ref]; ok {
			fmt.Fprintf(w, "secret:   %q of credential %s: no file %s; the real request is not forwarded\n", ref, c.Name, p)
		}
	}
}
