package main

// Running wrk and reading its report; reading the key=value lines of loadclient.

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The lines of wrk's report that a cell needs. Latencies are printed by
// wrk's format_time_us: "us", "ms" and "s" below a minute, then "m" and "h".
var (
	reReqs  = regexp.MustCompile(`(\d+) requests in`)
	reRPS   = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	reP50   = regexp.MustCompile(`\s50%\s+([\d.]+)(us|ms|s|m|h)\b`)
	reP99   = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s|m|h)\b`)
	reNon2  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSockE = regexp.MustCompile(`Socket errors: (.*)`)
)

// toUS converts a latency match (value, unit) to microseconds; 0 when
// there was no match.
func toUS(m []string) float64 {
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "ms":
		v *= 1e3
	case "s":
		v *= 1e6
	case "m":
		v *= 60e6
	case "h":
		v *= 3600e6
	}
	return v
}

// wrk runs wrk pinned to the load CPU and parses its report.
func (r *runner) wrk(c *cell, conns int, dur time.Duration, args []string) error {
	full := append([]string{"-c", loadCPU, "wrk", "-t1", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%.0fs", dur.Seconds()), "--latency", "--timeout", "5s"}, args...)
	out, err := exec.Command("taskset", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("wrk: %v: %s", err, out)
	}
	parseWrk(string(out), c)
	return nil
}

// parseWrk fills the request count, req/s, p50 and p99 (µs) of c from a
// wrk --latency report, and marks the cell bad (it does not score) on
// non-2xx responses, socket errors or no request at all.
func parseWrk(s string, c *cell) {
	if m := reReqs.FindStringSubmatch(s); m != nil {
		c.requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reRPS.FindStringSubmatch(s); m != nil {
		c.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	c.p50, c.p99 = toUS(reP50.FindStringSubmatch(s)), toUS(reP99.FindStringSubmatch(s))
	var bad []string
	if m := reNon2.FindStringSubmatch(s); m != nil {
		bad = append(bad, m[1]+" non-2xx")
	}
	if m := reSockE.FindStringSubmatch(s); m != nil {
		bad = append(bad, "socket errors: "+m[1])
	}
	if c.requests == 0 {
		bad = append(bad, "no requests")
	}
	c.bad = strings.Join(bad, "; ")
}

// kv reads the key=value numbers of a loadclient line.
var reKV = regexp.MustCompile(`(\w+)=([\d.]+)`)

func kv(s string) map[string]float64 {
	m := map[string]float64{}
	for _, x := range reKV.FindAllStringSubmatch(s, -1) {
		m[x[1]], _ = strconv.ParseFloat(x[2], 64)
	}
	return m
}
