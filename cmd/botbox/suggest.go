package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/telemetry"
)

const suggestUse = "botbox suggest --log FILE [--min-count N] [--no-routes]"

// Bounds of the proposal: a host with more distinct path globs than
// suggestMaxPaths has them collapsed to shorter prefixes ending in "/**".
const (
	suggestMaxPaths = 10
	// suggestMaxLine bounds one log line (decision lines are a few hundred
	// bytes; the path field is bounded by the proxy).
	suggestMaxLine = 1 << 20
)

// runSuggest reads decision lines ("proxy decision", JSON, one per line)
// and prints a proposed egress_policy: one allow rule per host seen in an
// allow or report_deny line, its ports, and routes whose paths are the
// observed paths with ID-like segments replaced by "*" and, when a host
// has many, collapsed into "prefix/**" globs. Lines of other decisions
// (requests the policy refused in enforce mode) and other lines are
// ignored. The output is deterministic (sorted) and loads with
// config.Parse (TestSuggestGolden).
func runSuggest(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox suggest", stderr)
	logPath := fs.String("log", "", "decision log file (JSON lines; - for stdin)")
	minCount := fs.Int("min-count", 1, "leave out hosts and routes seen fewer than N times")
	noRoutes := fs.Bool("no-routes", false, "propose hosts and ports only, without routes")
	setUsage(fs, suggestUse)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usageError(stderr, suggestUse, "botbox suggest: unexpected argument %q", fs.Arg(0))
	case *logPath == "":
		return usageError(stderr, suggestUse, "botbox suggest: --log FILE is required")
	case *minCount < 1:
		return usageError(stderr, suggestUse, "botbox suggest: --min-count must be at least 1")
	}
	in := io.Reader(os.Stdin)
	if *logPath != "-" {
		f, err := os.Open(*logPath)
		if err != nil {
			fmt.Fprintf(stderr, "botbox suggest: %v\n", err)
			return exitError
		}
		defer f.Close()
		in = f
	}
	obs, err := readDecisions(in)
	if err != nil {
		fmt.Fprintf(stderr, "botbox suggest: reading %s: %v\n", *logPath, err)
		return exitError
	}
	fmt.Fprint(stdout, obs.propose(*minCount, !*noRoutes))
	return exitOK
}

// decisionLine is the part of a "proxy decision" line suggest reads.
type decisionLine struct {
	Message  string `json:"message"`
	Decision string `json:"decision"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	// Repeated is set on a summary line of repeated identical decisions,
	// which has no path.
	Repeated int `json:"repeated"`
}

// hostObs is what was seen for one host.
type hostObs struct {
	count int
	ports map[int]bool
	// routes counts (method, templated path) pairs.
	routes map[[2]string]int
}

type observations struct {
	lines, used int
	hosts       map[string]*hostObs
}

var methodToken = regexp.MustCompile(`^[A-Z]{1,20}$`)

func readDecisions(r io.Reader) (*observations, error) {
	o := &observations{hosts: map[string]*hostObs{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), suggestMaxLine)
	for sc.Scan() {
		o.lines++
		var d decisionLine
		if json.Unmarshal(sc.Bytes(), &d) != nil || d.Message != "proxy decision" {
			continue
		}
		if d.Decision != telemetry.DecisionAllow && d.Decision != telemetry.DecisionReportDeny {
			continue
		}
		host, err := hostport.ParseHost(d.Host)
		if err != nil || d.Port < 1 || d.Port > 65535 {
			continue
		}
		o.used++
		h := o.hosts[host]
		if h == nil {
			h = &hostObs{ports: map[int]bool{}, routes: map[[2]string]int{}}
			o.hosts[host] = h
		}
		h.count++
		h.ports[d.Port] = true
		if d.Repeated > 0 {
			// A summary line: its requests count for the host, but it has
			// no path (never widen a route to "/**" from it); the line
			// before it carried the path.
			h.count += d.Repeated
			continue
		}
		if methodToken.MatchString(d.Method) {
			h.routes[[2]string{d.Method, templatePath(d.Path)}]++
		}
	}
	return o, sc.Err()
}

var (
	uuidSeg    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	hexSeg     = regexp.MustCompile(`^[0-9a-fA-F]{8,}$`)
	digitsSeg  = regexp.MustCompile(`^[0-9]+$`)
	plainSeg   = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)
	hasDigit   = regexp.MustCompile(`[0-9]`)
	hasLetter  = regexp.MustCompile(`[A-Za-z]`)
	longMixSeg = 16 // a letters-and-digits segment this long is an ID or token
)

// templatePath replaces the segments of an absolute path that look like
// identifiers (numbers, UUIDs, hex strings, long letter-and-digit tokens)
// or that hold characters outside the unreserved set with "*" (one
// segment). A path that is not absolute becomes "/**".
func templatePath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "/**"
	}
	if p == "/" {
		return "/"
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "":
			// An empty segment (trailing slash): kept, the route matcher
			// decides.
		case !plainSeg.MatchString(s), s == "*", s == "**",
			digitsSeg.MatchString(s), uuidSeg.MatchString(s),
			hexSeg.MatchString(s) && hasDigit.MatchString(s),
			len(s) >= longMixSeg && hasDigit.MatchString(s) && hasLetter.MatchString(s):
			segs[i] = "*"
		}
	}
	return "/" + strings.Join(segs, "/")
}

// collapse shortens paths until at most suggestMaxPaths remain: paths with
// more than depth segments become their first depth segments + "/**", for
// depth = 2, 1, then everything is "/**".
func collapse(paths []string) []string {
	for depth := 2; len(paths) > suggestMaxPaths && depth >= 0; depth-- {
		set := map[string]bool{}
		for _, p := range paths {
			set[prefixGlob(p, depth)] = true
		}
		paths = sortedKeys(set)
	}
	return paths
}

func prefixGlob(p string, depth int) string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(segs) <= depth {
		return p
	}
	if depth == 0 {
		return "/**"
	}
	return "/" + strings.Join(segs[:depth], "/") + "/**"
}

// covered reports whether glob g (ending in "/**") covers path p.
func covered(g, p string) bool {
	if g == p || !strings.HasSuffix(g, "/**") {
		return false
	}
	prefix := strings.TrimSuffix(g, "**")
	return prefix == "/" || strings.HasPrefix(p, prefix) || p+"/" == prefix
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// propose renders the proposal.
func (o *observations) propose(minCount int, routes bool) string {
	var b strings.Builder
	hosts := sortedKeys(o.hosts)
	kept := 0
	for _, h := range hosts {
		if o.hosts[h].count >= minCount {
			kept++
		}
	}
	fmt.Fprintf(&b, "# Proposed by botbox suggest from %d log lines (%d allow/report_deny decisions), %d hosts.\n", o.lines, o.used, kept)
	b.WriteString("# A starting point for a least-privilege policy: review every rule, then add\n")
	b.WriteString("# header_rewrites and limits. Paths: * is one segment, ** any number.\n")
	b.WriteString("egress_policy:\n  default_action: deny\n")
	if kept == 0 {
		b.WriteString("  rules: []\n")
		return b.String()
	}
	b.WriteString("  rules:\n")
	for _, host := range hosts {
		h := o.hosts[host]
		if h.count < minCount {
			continue
		}
		fmt.Fprintf(&b, "    - host: %s\n      action: allow\n", yamlString(host))
		ports := make([]int, 0, len(h.ports))
		for p := range h.ports {
			ports = append(ports, p)
		}
		slices.Sort(ports)
		if !slices.Equal(ports, []int{443}) {
			strs := make([]string, len(ports))
			for i, p := range ports {
				strs[i] = strconv.Itoa(p)
			}
			fmt.Fprintf(&b, "      allowed_ports: [%s]\n", strings.Join(strs, ", "))
		}
		if routes {
			writeRoutes(&b, h, minCount)
		}
	}
	return b.String()
}

// writeRoutes groups the host's path globs by the set of methods seen on
// them: one route per method set, sorted.
func writeRoutes(b *strings.Builder, h *hostObs, minCount int) {
	methodsOf := map[string]map[string]bool{} // path -> methods
	var paths []string
	for k, n := range h.routes {
		if n < minCount {
			continue
		}
		if methodsOf[k[1]] == nil {
			methodsOf[k[1]] = map[string]bool{}
			paths = append(paths, k[1])
		}
		methodsOf[k[1]][k[0]] = true
	}
	if len(paths) == 0 {
		return
	}
	slices.Sort(paths)
	globs := collapse(paths)
	byGlob := map[string]map[string]bool{}
	for _, g := range globs {
		byGlob[g] = map[string]bool{}
	}
	for _, p := range paths {
		for _, g := range globs {
			if g == p || covered(g, p) {
				for m := range methodsOf[p] {
					byGlob[g][m] = true
				}
			}
		}
	}
	// Drop a glob another glob covers (its methods go to the wider one).
	final := map[string]map[string]bool{}
	for _, g := range globs {
		wider := ""
		for _, o := range globs {
			if o != g && covered(o, g) {
				wider = o
			}
		}
		if wider == "" {
			if final[g] == nil {
				final[g] = map[string]bool{}
			}
			for m := range byGlob[g] {
				final[g][m] = true
			}
		} else {
			if final[wider] == nil {
				final[wider] = map[string]bool{}
			}
			for m := range byGlob[g] {
				final[wider][m] = true
			}
		}
	}
	groups := map[string][]string{} // "GET,HEAD" -> paths
	for _, g := range sortedKeys(final) {
		key := strings.Join(sortedKeys(final[g]), ", ")
		groups[key] = append(groups[key], g)
	}
	b.WriteString("      routes:\n")
	for _, key := range sortedKeys(groups) {
		quoted := make([]string, len(groups[key]))
		for i, p := range groups[key] {
			quoted[i] = yamlString(p)
		}
		fmt.Fprintf(b, "        - methods: [%s]\n          paths: [%s]\n", key, strings.Join(quoted, ", "))
	}
}

// yamlString quotes s as a YAML double-quoted scalar (JSON's escaping is
// a subset of YAML's).
func yamlString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
