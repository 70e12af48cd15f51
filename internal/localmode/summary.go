package localmode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/botbox/botbox/internal/telemetry"
)

// decisionMessage is the message of the proxy's decision lines.
const decisionMessage = "proxy decision"

// maxSummaryHosts bounds the hosts the summary tracks: the names are the
// command's choice, and it must not grow BotBox's memory without end.
const maxSummaryHosts = 1024

// hostCount is one host's line in the summary.
type hostCount struct {
	allowed, denied int
	firstDenial     string // decision and reason of the first denial
}

// Summary counts the decision lines by host. It is a slog.Handler that
// passes every record on to next (nil: none).
type Summary struct {
	next  slog.Handler
	state *summaryState
}

type summaryState struct {
	mu       sync.Mutex
	hosts    map[string]*hostCount
	other    hostCount // hosts beyond maxSummaryHosts
	first    string    // the first denial of the run: host, decision, reason
	reported int       // report_deny lines
}

// NewSummary returns a Summary handler in front of next.
func NewSummary(next slog.Handler) *Summary {
	return &Summary{next: next, state: &summaryState{hosts: map[string]*hostCount{}}}
}

// Enabled implements slog.Handler: decision lines are INFO or WARN.
func (s *Summary) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || s.next != nil && s.next.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (s *Summary) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == decisionMessage {
		s.record(r)
	}
	if s.next != nil && s.next.Enabled(ctx, r.Level) {
		return s.next.Handle(ctx, r)
	}
	return nil
}

func (s *Summary) record(r slog.Record) {
	var host, decision, reason string
	n := 1
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case telemetry.KeyHost:
			host = a.Value.String()
		case telemetry.KeyDecision:
			decision = a.Value.String()
		case telemetry.KeyReason:
			reason = a.Value.String()
		case telemetry.KeyRepeated:
			if v := int(a.Value.Int64()); v > 0 {
				n = v
			}
		}
		return true
	})
	st := s.state
	st.mu.Lock()
	defer st.mu.Unlock()
	c, ok := st.hosts[host]
	if !ok {
		if len(st.hosts) >= maxSummaryHosts {
			c = &st.other
		} else {
			c = &hostCount{}
			st.hosts[host] = c
		}
	}
	if decision == telemetry.DecisionAllow {
		c.allowed += n
		return
	}
	if decision == telemetry.DecisionReportDeny {
		st.reported += n
	}
	c.denied += n
	what := decision
	if reason != "" {
		what += " (" + reason + ")"
	}
	if c.firstDenial == "" {
		c.firstDenial = what
	}
	if st.first == "" {
		st.first = printable(host) + ": " + what
	}
}

// WithAttrs implements slog.Handler.
func (s *Summary) WithAttrs(as []slog.Attr) slog.Handler {
	out := &Summary{state: s.state}
	if s.next != nil {
		out.next = s.next.WithAttrs(as)
	}
	return out
}

// WithGroup implements slog.Handler.
func (s *Summary) WithGroup(name string) slog.Handler {
	out := &Summary{state: s.state}
	if s.next != nil {
		out.next = s.next.WithGroup(name)
	}
	return out
}

// Write prints the summary: one line per host, allowed and denied counts,
// the first denial's decision and reason, sorted by host. Host names are
// the command's input: control characters are escaped, so the summary
// cannot write to the terminal on the command's behalf.
func (s *Summary) Write(w io.Writer) {
	st := s.state
	st.mu.Lock()
	defer st.mu.Unlock()
	hosts := slices.Sorted(func(yield func(string) bool) {
		for h := range st.hosts {
			if !yield(h) {
				return
			}
		}
	})
	if len(hosts) == 0 {
		fmt.Fprintln(w, "botbox exec: no HTTP(S) request went through BotBox")
		return
	}
	var allowed, denied int
	var b strings.Builder
	for _, h := range hosts {
		c := st.hosts[h]
		allowed += c.allowed
		denied += c.denied
		fmt.Fprintf(&b, "  %-40s %5d allowed %5d denied", printable(h), c.allowed, c.denied)
		if c.firstDenial != "" {
			fmt.Fprintf(&b, "  first: %s", c.firstDenial)
		}
		b.WriteByte('\n')
	}
	if o := st.other; o.allowed+o.denied > 0 {
		allowed += o.allowed
		denied += o.denied
		fmt.Fprintf(&b, "  %-40s %5d allowed %5d denied\n", fmt.Sprintf("(%d more hosts)", maxSummaryHosts), o.allowed, o.denied)
	}
	fmt.Fprintf(w, "botbox exec: %d requests allowed, %d denied\n%s", allowed, denied, b.String())
	if st.reported > 0 {
		fmt.Fprintf(w, "botbox exec: report mode: %d of the denied requests were forwarded without credentials\n", st.reported)
	}
	if st.first != "" {
		fmt.Fprintf(w, "botbox exec: first denial: %s\n", st.first)
	}
}

// printable escapes control characters and non-ASCII bytes (%q without
// the quotes); an empty host prints as "(no host)".
func printable(s string) string {
	if s == "" {
		return "(no host)"
	}
	q := fmt.Sprintf("%+q", s)
	return q[1 : len(q)-1]
}
