package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/botbox/botbox/internal/hostport"
	"github.com/botbox/botbox/internal/telemetry"
)

const suggestUse = "botbox suggest --log FILE [--min-count N] [--no-routes] [--config FILE]"

// Bounds of the proposal: a host with more distinct path globs than
// suggestMaxPaths for one method has them collapsed to shorter prefixes
// ending in "/**"; a route with more than suggestManyMethods methods, or
// reaching "/**", is flagged for review.
const (
	suggestMaxPaths    = 10
	suggestManyMethods = 3
	// suggestMaxLine bounds one log line (decision lines are a few hundred
	// bytes; the path field is bounded by the proxy).
	suggestMaxLine = 1 << 20
)

// runSuggest reads decision lines ("proxy decision", JSON, one per line)
// and prints a proposed egress_policy: one allow rule per host seen in an
// allow or report_deny line, its ports, and routes whose paths are the
// observed paths with ID-like segments replaced by "*" and, when a method
// has many on a host, collapsed into "prefix/**" globs. Lines of other
// decisions (requests the policy refused in enforce mode) and other lines
// are ignored; a log without any decision line is an error. The output is
// deterministic (sorted) and loads with config.Parse (TestSuggestGolden).
// With --config FILE the proposal is merged into that configuration
// (mergeProposal), which keeps everything the proposal does not decide.
func runSuggest(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox suggest", stderr)
	logPath := fs.String("log", "", "decision log file (JSON lines; - for stdin)")
	minCount := fs.Int("min-count", 1, "leave out hosts and routes seen fewer than N times (a host left without routes is left out)")
	noRoutes := fs.Bool("no-routes", false, "propose hosts and ports only, without routes")
	configPath := fs.String("config", "", "merge the proposal into this configuration file, keeping its rewrites, limits and other settings")
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
	if obs.decisions == 0 {
		fmt.Fprintf(stderr, "Error: %s has no \"proxy decision\" lines (%d lines read): give the decision log BotBox writes to stderr (JSON lines)\n", *logPath, obs.lines)
		return exitError
	}
	p := obs.proposal(*minCount, !*noRoutes)
	for _, w := range p.warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if *configPath == "" {
		fmt.Fprint(stdout, p.render())
		return exitOK
	}
	base, err := os.ReadFile(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return exitError
	}
	out, notes, err := mergeProposal(base, p)
	if err != nil {
		fmt.Fprintf(stderr, "Error: merging into %s: %v\n", *configPath, err)
		return exitError
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	fmt.Fprint(stdout, out)
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
	// lines read, decision lines among them, used (allow/report_deny of a
	// valid host), and used lines whose path could not be a route.
	lines, decisions, used, pathless int
	hosts                            map[string]*hostObs
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
		o.decisions++
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
		path := d.Path
		if path == "" {
			// An absolute-form target without a path ("DELETE
			// http://host"): BotBox forwards "/" (older logs said "").
			path = "/"
		}
		if !methodToken.MatchString(d.Method) || d.Method == http.MethodConnect || !strings.HasPrefix(path, "/") {
			// No route can name it ("OPTIONS *", a CONNECT, a forged
			// method): counted, never widened into "/**".
			o.pathless++
			continue
		}
		h.routes[[2]string{d.Method, templatePath(path)}]++
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
// segment). It is given absolute paths only (readDecisions skips the
// others); anything else becomes "/", never a glob.
func templatePath(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "/"
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

// proposedRule is one allow rule of a proposal.
type proposedRule struct {
	host  string
	ports []int // sorted; [443] is the default
	// routes is nil for a rule without routes (--no-routes).
	routes []proposedRoute
}

// proposedRoute is one allow route: methods and path globs, sorted.
type proposedRoute struct {
	methods, paths []string
}

// proposal is what suggest proposes, before rendering or merging.
type proposal struct {
	obs    *observations
	rules  []proposedRule
	routes bool
	// leftOut names the hosts seen often enough whose routes were all seen
	// too rarely: left out, never proposed without routes.
	leftOut []string
}

// proposal builds the proposal: hosts seen at least minCount times, with
// (when routes) the routes seen at least minCount times. A host none of
// whose routes is kept is left out entirely, so a higher --min-count only
// ever narrows the proposal (TestSuggestMinCountOnlyNarrows).
func (o *observations) proposal(minCount int, routes bool) *proposal {
	p := &proposal{obs: o, routes: routes}
	for _, host := range sortedKeys(o.hosts) {
		h := o.hosts[host]
		if h.count < minCount {
			continue
		}
		r := proposedRule{host: host}
		for port := range h.ports {
			r.ports = append(r.ports, port)
		}
		slices.Sort(r.ports)
		if routes {
			r.routes = proposeRoutes(h, minCount)
			if len(r.routes) == 0 {
				p.leftOut = append(p.leftOut, host)
				continue
			}
		}
		p.rules = append(p.rules, r)
	}
	return p
}

// warnings flags what a reviewer must look at: a route that reaches every
// path ("/**") or allows many methods, hosts left out by --min-count, and
// lines no route could name.
func (p *proposal) warnings() []string {
	var out []string
	for _, r := range p.rules {
		for i, rt := range r.routes {
			if slices.Contains(rt.paths, "/**") {
				out = append(out, fmt.Sprintf("%s: routes[%d] reaches every path (\"/**\"): more than %d distinct paths were collapsed; review it", r.host, i, suggestMaxPaths))
			}
			if len(rt.methods) > suggestManyMethods {
				out = append(out, fmt.Sprintf("%s: routes[%d] allows %d methods (%s); review it", r.host, i, len(rt.methods), strings.Join(rt.methods, ", ")))
			}
		}
	}
	for _, h := range p.leftOut {
		out = append(out, fmt.Sprintf("%s: left out: no route of it was seen --min-count times", h))
	}
	if p.obs.pathless > 0 {
		out = append(out, fmt.Sprintf("%d decision lines without a path a route can name (\"OPTIONS *\", CONNECT) were counted for their host only", p.obs.pathless))
	}
	return out
}

// render prints the proposal as a configuration.
func (p *proposal) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Proposed by botbox suggest from %d log lines (%d allow/report_deny decisions), %d hosts.\n", p.obs.lines, p.obs.used, len(p.rules))
	b.WriteString("# A starting point for a least-privilege policy: review every rule, then add\n")
	b.WriteString("# header_rewrites and limits. Paths: * is one segment, ** any number.\n")
	for _, w := range p.warnings() {
		fmt.Fprintf(&b, "# REVIEW: %s\n", w)
	}
	b.WriteString("egress_policy:\n  default_action: deny\n")
	if len(p.rules) == 0 {
		b.WriteString("  rules: []\n")
		return b.String()
	}
	b.WriteString("  rules:\n")
	for _, r := range p.rules {
		fmt.Fprintf(&b, "    - host: %s\n      action: allow\n", yamlString(r.host))
		if !slices.Equal(r.ports, []int{443}) {
			fmt.Fprintf(&b, "      allowed_ports: [%s]\n", joinInts(r.ports))
		}
		if len(r.routes) == 0 {
			continue
		}
		b.WriteString("      routes:\n")
		for _, rt := range r.routes {
			quoted := make([]string, len(rt.paths))
			for i, p := range rt.paths {
				quoted[i] = yamlString(p)
			}
			fmt.Fprintf(&b, "        - methods: [%s]\n          paths: [%s]\n", strings.Join(rt.methods, ", "), strings.Join(quoted, ", "))
		}
	}
	return b.String()
}

func joinInts(ns []int) string {
	strs := make([]string, len(ns))
	for i, n := range ns {
		strs[i] = strconv.Itoa(n)
	}
	return strings.Join(strs, ", ")
}

// proposeRoutes returns the host's routes seen at least minCount times:
// each method's paths collapsed on their own (collapse), so a method seen
// on one path never gains the paths of another method; then one route per
// set of methods sharing the same globs, sorted.
func proposeRoutes(h *hostObs, minCount int) []proposedRoute {
	pathsOf := map[string][]string{} // method -> templated paths
	for k, n := range h.routes {
		if n >= minCount {
			pathsOf[k[0]] = append(pathsOf[k[0]], k[1])
		}
	}
	methodsOf := map[string]map[string]bool{} // glob -> methods
	for m, paths := range pathsOf {
		slices.Sort(paths)
		for _, g := range dropCovered(collapse(paths)) {
			if methodsOf[g] == nil {
				methodsOf[g] = map[string]bool{}
			}
			methodsOf[g][m] = true
		}
	}
	groups := map[string][]string{} // "GET, HEAD" -> globs
	for _, g := range sortedKeys(methodsOf) {
		key := strings.Join(sortedKeys(methodsOf[g]), ", ")
		groups[key] = append(groups[key], g)
	}
	var out []proposedRoute
	for _, key := range sortedKeys(groups) {
		out = append(out, proposedRoute{methods: strings.Split(key, ", "), paths: groups[key]})
	}
	return out
}

// dropCovered removes the globs another glob of the list covers.
func dropCovered(globs []string) []string {
	var out []string
	for _, g := range globs {
		if !slices.ContainsFunc(globs, func(o string) bool { return o != g && covered(o, g) }) {
			out = append(out, g)
		}
	}
	return out
}

// yamlString quotes s as a YAML double-quoted scalar (JSON's escaping is
// a subset of YAML's).
func yamlString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
