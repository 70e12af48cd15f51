package main

// Cells (one measurement each) and the printed table.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

type cell struct {
	scenario, target string
	conns, rep       int
	requests         int64
	rps, p50, p99    float64 // req/s, µs
	cpuUS, originUS  float64 // CPU µs per request (proxy tree, origin)
	peakMiB          float64
	mibps            float64 // stream throughput
	extra            string
	bad              string // non-2xx or errors: the cell does not score
	busy0, busy1     float64
}

func (r *runner) record(c cell) {
	r.cells = append(r.cells, c)
	line := fmt.Sprintf("scenario=%s target=%s conns=%d rep=%d requests=%d rps=%.1f p50_us=%.1f p99_us=%.1f cpu_us_per_req=%.2f origin_us_per_req=%.2f peak_rss_mib=%.1f mib_s=%.1f cpu0_busy=%.0f%% cpu1_busy=%.0f%%",
		c.scenario, c.target, c.conns, c.rep, c.requests, c.rps, c.p50, c.p99, c.cpuUS, c.originUS, c.peakMiB, c.mibps, c.busy0, c.busy1)
	if c.extra != "" {
		line += " " + c.extra
	}
	if c.bad != "" {
		line += " INVALID=" + strconv.Quote(c.bad)
	}
	r.raw.WriteString(line + "\n")
	fmt.Fprintln(os.Stderr, line)
}

func (r *runner) invalid() []string {
	var out []string
	for _, c := range r.cells {
		if c.bad != "" {
			out = append(out, fmt.Sprintf("%s/%s/c=%d rep %d: %s", c.scenario, c.target, c.conns, c.rep, c.bad))
		}
	}
	return out
}

func (r *runner) table() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nBotBox benchmark — median [min–max] over %d repeat(s); ratios are paired per repeat.\n", r.repeats)
	fmt.Fprintf(&b, "CPU = proxy process CPU time per request (µs, utime+stime); origin = origin CPU per request; RSS = peak (VmHWM) in the cell.\n")
	rps := func(c cell) float64 { return c.rps }
	cpu := func(c cell) float64 { return c.cpuUS }
	section := func(title, scn string, conns []int, targets []string, withDirect bool) {
		if len(r.cells) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n", title)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "conns\ttarget\treq/s\tp50 µs\tp99 µs\tCPU µs/req\torigin µs/req\tpeak RSS MiB\treq/s ×nginx\tCPU ×nginx\treq/s ×direct\tload CPU busy %\t")
		for _, n := range conns {
			for _, t := range targets {
				g := r.group(scn, t, n)
				if len(g) == 0 {
					continue
				}
				dr := "-"
				if withDirect && t != "direct" {
					dr = r.ratio(scn, t, "direct", n, rps)
				}
				xn, xc := "-", "-"
				if t != "nginx" {
					xn = r.ratio(scn, t, "nginx", n, rps)
				}
				if t != "nginx" && t != "direct" { // direct's CPU column is the origin's
					xc = r.ratio(scn, t, "nginx", n, cpu)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, t,
					field(g, rps), trim(field(g, func(c cell) float64 { return c.p50 }).med), trim(field(g, func(c cell) float64 { return c.p99 }).med),
					field(g, cpu), trim(field(g, func(c cell) float64 { return c.originUS }).med),
					trim(field(g, func(c cell) float64 { return c.peakMiB }).max), xn, xc, dr,
					trim(field(g, func(c cell) float64 { return c.busy1 }).med))
			}
		}
		_ = tw.Flush()
	}
	small := r.smallTargets()
	section("Small JSON requests, keep-alive (wrk)", "small", []int{1, 16, 128}, small, true)
	section("POST with a 1 KiB JSON body, keep-alive (wrk)", "post", []int{16}, small, true)
	if len(r.group("small", "floor", 16)) > 0 {
		fmt.Fprintf(&b, "\nBotBox vs Go floor (req/s): c=16 %s, c=128 %s; CPU/req: c=16 %s, c=128 %s\n",
			r.ratio("small", "botbox", "floor", 16, rps), r.ratio("small", "botbox", "floor", 128, rps),
			r.ratio("small", "botbox", "floor", 16, cpu), r.ratio("small", "botbox", "floor", 128, cpu))
	}

	if g := r.group("stream", "botbox", 1); len(g) > 0 {
		fmt.Fprintf(&b, "\n## 256 MiB stream (curl, one connection)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tMiB/s\tCPU µs/MiB\tpeak RSS MiB\tMiB/s ×nginx\tMiB/s ×direct\t")
		mib := func(c cell) float64 { return c.mibps }
		streamTargets := []string{"botbox", "nginx", "floor", "direct"}
		for _, v := range r.variants {
			streamTargets = append(streamTargets, v.name)
		}
		for _, t := range streamTargets {
			g := r.group("stream", t, 1)
			if len(g) == 0 {
				continue
			}
			xn, dr := "-", "-"
			if t != "nginx" {
				xn = r.ratio("stream", t, "nginx", 1, mib)
			}
			if t != "direct" {
				dr = r.ratio("stream", t, "direct", 1, mib)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", t, field(g, mib), field(g, cpu), trim(field(g, func(c cell) float64 { return c.peakMiB }).max), xn, dr)
		}
		_ = tw.Flush()
	}
	section("HTTPS interception, keep-alive (wrk over TLS; nginx = static leaf)", "intercept-keepalive", []int{16, 128}, []string{"botbox", "nginx"}, false)
	section("HTTPS interception, new TLS connection per request (loadclient, 16 workers, full handshakes)", "intercept-newconn", []int{16}, []string{"botbox", "nginx", "direct"}, true)

	if g := r.group("first-seen-sni", "botbox", 1); len(g) > 0 {
		fmt.Fprintf(&b, "\n## First-seen SNI (new connection each; fresh SNI vs cached SNI, alternated)\n")
		fresh := field(g, func(c cell) float64 { return kv(c.extra)["fresh_p50_us"] })
		cached := field(g, func(c cell) float64 { return kv(c.extra)["cached_p50_us"] })
		delta := field(g, func(c cell) float64 { return kv(c.extra)["delta_p50_us"] })
		fmt.Fprintf(&b, "p50 fresh SNI %s µs, cached SNI %s µs, added by leaf issuance %s µs (target ≤ 1000 µs)\n", fresh, cached, delta)
	}
	var idle []cell
	for _, c := range r.cells {
		if c.scenario == "idle-10k" {
			idle = append(idle, c)
		}
	}
	if len(idle) > 0 {
		fmt.Fprintf(&b, "\n## 10,000 idle keep-alive client connections (one request each, then idle)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tconns\tRSS before MiB\tRSS after MiB\tKiB per conn\t")
		for _, c := range idle {
			v := kv(c.extra)
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t\n", c.target, c.conns, v["rss_before_kib"]/1024, v["rss_after_kib"]/1024, v["kib_per_conn"])
		}
		_ = tw.Flush()
	}
	if g := r.group("dns-guard", "botbox", 1); len(g) > 0 {
		fmt.Fprintf(&b, "\n## DNS guard: allowed, cached name (one UDP client, back to back; floor = bare miekg/dns server)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tqueries/s\tp50 µs\tp99 µs\tCPU µs/query\t")
		for _, t := range []string{"botbox", "floor"} {
			g := r.group("dns-guard", t, 1)
			if len(g) == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", t, field(g, rps), field(g, func(c cell) float64 { return c.p50 }),
				field(g, func(c cell) float64 { return c.p99 }), field(g, cpu))
		}
		_ = tw.Flush()
		fmt.Fprintf(&b, "p50 added by the guard (paired per repeat): %s µs\n", r.dnsAdded())
	}
	b.WriteString(r.targetsSummary())
	if bad := r.invalid(); len(bad) > 0 {
		fmt.Fprintf(&b, "\nINVALID cells (excluded from the table):\n  %s\n", strings.Join(bad, "\n  "))
	}
	return b.String()
}

// targetsSummary checks the targets of issue 5 on this run's medians of
// paired ratios.
func (r *runner) targetsSummary() string {
	var b strings.Builder
	b.WriteString("\n## Targets (issue 5), from this run\n")
	med := func(scn, t, ref string, conns int, f func(cell) float64) (float64, bool) {
		a, bb := r.group(scn, t, conns), r.group(scn, ref, conns)
		var v []float64
		for _, x := range a {
			for _, y := range bb {
				if x.rep == y.rep && f(y) > 0 {
					v = append(v, f(x)/f(y))
				}
			}
		}
		if len(v) == 0 {
			return 0, false
		}
		return stats(v).med, true
	}
	check := func(name string, v float64, ok bool, want string, met bool) {
		if !ok {
			return
		}
		verdict := "NOT MET"
		if met {
			verdict = "met"
		}
		fmt.Fprintf(&b, "  %-55s %8.2f  (%s)  %s\n", name, v, want, verdict)
	}
	rps := func(c cell) float64 { return c.rps }
	p99 := func(c cell) float64 { return c.p99 }
	for _, n := range []int{16, 128} {
		v, ok := med("small", "botbox", "floor", n, rps)
		check(fmt.Sprintf("small c=%d: req/s BotBox / Go floor", n), v, ok, "≥ 1.5", v >= 1.5)
		v, ok = med("small", "botbox", "nginx", n, rps)
		check(fmt.Sprintf("small c=%d: req/s BotBox / nginx", n), v, ok, "goal ≥ 1.0", v >= 1.0)
		v, ok = med("small", "botbox", "nginx", n, p99)
		check(fmt.Sprintf("small c=%d: p99 BotBox / nginx", n), v, ok, "goal ≤ 1.0", v <= 1.0)
	}
	v, ok := med("stream", "botbox", "nginx", 1, func(c cell) float64 { return c.mibps })
	check("256 MiB stream: MiB/s BotBox / nginx", v, ok, "≥ 0.8", v >= 0.8)
	if g := r.group("stream", "botbox", 1); len(g) > 0 {
		peak := field(g, func(c cell) float64 { return c.peakMiB }).max
		check("256 MiB stream: BotBox peak RSS (MiB)", peak, true, "≤ 32", peak <= 32)
	}
	// Issue 13: response scrubbing on ("botbox") against the same build
	// with scrub_responses: false.
	v, ok = med("stream", "botbox", scrubOffName, 1, func(c cell) float64 { return c.mibps })
	check("256 MiB stream: MiB/s scrub on / scrub off", v, ok, "≥ 0.8", v >= 0.8)
	for _, n := range []int{16, 128} {
		v, ok = med("small", "botbox", scrubOffName, n, func(c cell) float64 { return c.cpuUS })
		check(fmt.Sprintf("small c=%d: CPU/req scrub on / scrub off", n), v, ok, "≤ 1.10", v <= 1.10)
	}
	// Issue 18: this build against a baseline binary run as the variant
	// "base" (BOTBOX_VARIANTS="base=@/path/to/botbox"), and scrubbing the
	// responses of rules that inject nothing ("noinject", "scruball").
	for _, n := range []int{1, 16, 128} {
		v, ok = med("small", "botbox", "botbox-base", n, func(c cell) float64 { return c.cpuUS })
		check(fmt.Sprintf("small c=%d: CPU/req BotBox / base", n), v, ok, "≤ 1.10", v <= 1.10)
	}
	v, ok = med("stream", "botbox", "botbox-base", 1, func(c cell) float64 { return c.mibps })
	check("256 MiB stream: MiB/s BotBox / base", v, ok, "≥ 0.9", v >= 0.9)
	v, ok = med("stream", "botbox", "botbox-base", 1, func(c cell) float64 { return c.cpuUS })
	check("256 MiB stream: CPU/MiB BotBox / base", v, ok, "info", true)
	for _, n := range []int{1, 16, 128} {
		v, ok = med("small", "botbox-scruball", "botbox-noinject", n, func(c cell) float64 { return c.cpuUS })
		check(fmt.Sprintf("small c=%d: CPU/req scrub all / none (no injection)", n), v, ok, "info", true)
	}
	// Issue 21: a SigV4 re-signed request (variant "sigv4",
	// BOTBOX_VARIANTS="sigv4=credential=sigv4") against the header-injected
	// one of the same run.
	for _, sc := range []string{"small", "post"} {
		for _, n := range []int{1, 16, 128} {
			v, ok = med(sc, "botbox-sigv4", "botbox", n, func(c cell) float64 { return c.cpuUS })
			check(fmt.Sprintf("%s c=%d: CPU/req SigV4 re-signed / header-injected", sc, n), v, ok, "≤ 1.30", v <= 1.30)
		}
	}
	v, ok = med("intercept-newconn", "botbox", "nginx", 16, rps)
	check("interception, new conn/request: req/s BotBox / nginx", v, ok, "≥ 1.0", v >= 1.0)
	v, ok = med("intercept-newconn", "botbox", "nginx", 16, func(c cell) float64 { return c.cpuUS })
	check("interception, new conn/request: CPU/req BotBox / nginx", v, ok, "info", true)
	if g := r.group("first-seen-sni", "botbox", 1); len(g) > 0 {
		d := field(g, func(c cell) float64 { return kv(c.extra)["delta_p50_us"] }).med
		check("first-seen SNI: added p50 (µs)", d, true, "≤ 1000", d <= 1000)
	}
	if g := r.group("dns-guard", "botbox", 1); len(g) > 0 {
		p50 := field(g, func(c cell) float64 { return c.p50 }).med
		check("DNS guard, allowed cached name: p50 (µs)", p50, true, "≤ 100", p50 <= 100)
	}
	if d := r.dnsAddedStat(); d != nil {
		check("DNS guard, allowed cached name: p50 over the floor (µs)", d.med, true, "info", true)
	}
	for _, c := range r.cells {
		if c.scenario == "idle-10k" && c.target == "botbox" && c.bad == "" {
			check("10k idle keep-alive conns: BotBox KiB per connection", kv(c.extra)["kib_per_conn"], true, "reported", true)
		}
	}
	return b.String()
}

// dnsAddedStat is the DNS guard's p50 minus the floor's, paired per
// repeat; nil without both.
func (r *runner) dnsAddedStat() *stat {
	var v []float64
	for _, a := range r.group("dns-guard", "botbox", 1) {
		for _, f := range r.group("dns-guard", "floor", 1) {
			if a.rep == f.rep {
				v = append(v, a.p50-f.p50)
			}
		}
	}
	if len(v) == 0 {
		return nil
	}
	s := stats(v)
	return &s
}

func (r *runner) dnsAdded() string {
	if s := r.dnsAddedStat(); s != nil {
		return s.String()
	}
	return "-"
}
