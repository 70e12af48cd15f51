package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/botbox/botbox/internal/hostport"
)

// FieldError is one configuration problem. Parse joins every FieldError it
// finds with errors.Join; Problems lists them back.
type FieldError struct {
	// Path is the key path, e.g. "egress_policy.rules[2].allowed_ports[0]";
	// "" for problems of the whole file (syntax, empty file).
	Path string
	// Line is the 1-based line in the file, 0 when unknown (e.g. a missing key
	// of the top level).
	Line int
	// Msg says what is wrong. It never contains a header value or a secret.
	Msg string
}

// Error formats "line 12: egress_policy.rules[2].host: msg", leaving out
// the parts that are unknown.
func (e *FieldError) Error() string {
	s := ""
	if e.Line > 0 {
		s = "line " + strconv.Itoa(e.Line) + ": "
	}
	if e.Path != "" {
		s += e.Path + ": "
	}
	return s + e.Msg
}

// Problems returns every *FieldError inside err (as returned by Parse or
// Load), in order. It returns nil when err holds none.
func Problems(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// joinProblems turns a list of problems into one error (nil when empty).
func joinProblems(ps []*FieldError) error {
	if len(ps) == 0 {
		return nil
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// hostHint returns the fix for a rule host that hostport refused, as
// " (write the bare host: api.x.com)", or "" when there is no obvious one.
// Users paste URLs ("https://api.x.com/v1") and wildcards into host:.
func hostHint(raw string) string {
	s := raw
	if _, rest, ok := strings.Cut(s, "://"); ok {
		s = rest
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if s == raw {
		return ""
	}
	hp, err := hostport.Parse(s)
	if err != nil {
		return ""
	}
	if hp.HasPort && hp.Port != 443 {
		return fmt.Sprintf(" (write the bare host: %s, and list port %d in allowed_ports)", hp.Host, hp.Port)
	}
	return fmt.Sprintf(" (write the bare host: %s)", hp.Host)
}

// portHint is the fix for a rule host written with a port, which is
// ignored (see ruleHost): the message already names allowed_ports.
func portHint(hp hostport.HostPort) string {
	return "; write the bare host: " + hp.Host
}
