package main

// The scenarios: each runs its cells, interleaved over targets and repeated.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func (r *runner) smallTargets() []string {
	t := []string{"botbox", "nginx", "floor", "direct"}
	for _, v := range r.variants {
		t = append(t, v.name)
	}
	if s := os.Getenv("TARGETS"); s != "" {
		t = strings.Split(s, ",")
	}
	return t
}

// rotate returns ts rotated by k, so that no target always runs first.
func rotate(ts []string, k int) []string {
	k %= len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

func (r *runner) port(target string) int {
	switch target {
	case "botbox":
		return botboxPort
	case "nginx":
		return nginxPort
	case "floor":
		return floorPort
	}
	for i, v := range r.variants {
		if v.name == target {
			return variantBasePort + 10*i
		}
	}
	return originPort
}

// wrkArgs returns the URL and headers of the plain-mode scenarios: through a
// proxy, plain HTTP with the origin in Host and a wrong credential the
// proxy must replace; direct, HTTPS with the right credential.
func (r *runner) wrkArgs(target, path string) []string {
	if target == "direct" {
		return []string{"-H", "Authorization: Bearer " + token, fmt.Sprintf("https://127.0.0.1:%d%s", originPort, path)}
	}
	if r.resigns(target) {
		// An unsigned AWS request, which the credential=sigv4 variant
		// signs (an Authorization of another scheme would be refused).
		return []string{"-H", fmt.Sprintf("Host: 127.0.0.1:%d", originPort), fmt.Sprintf("http://127.0.0.1:%d%s", r.port(target), path)}
	}
	return []string{"-H", fmt.Sprintf("Host: 127.0.0.1:%d", originPort), "-H", "Authorization: " + clientAuth,
		fmt.Sprintf("http://127.0.0.1:%d%s", r.port(target), path)}
}

// resigns reports whether target is a credential=sigv4 variant.
func (r *runner) resigns(target string) bool {
	for _, v := range r.variants {
		if v.name == target && slices.Contains(strings.Split(v.env, ","), credentialEnv) {
			return true
		}
	}
	return false
}

func (r *runner) curl(target, path string) string {
	args := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", r.path("ca.crt")}
	w := r.wrkArgs(target, path)
	for i := 0; i+1 < len(w); i += 2 {
		args = append(args, w[i], w[i+1])
	}
	out, _ := exec.Command("curl", append(args, w[len(w)-1])...).Output()
	return string(out)
}

func (r *runner) small() error {
	conns := []int{1, 16, 128}
	if s := os.Getenv("CONNS"); s != "" {
		conns = nil
		for _, x := range strings.Split(s, ",") {
			n, err := strconv.Atoi(x)
			if err != nil {
				return fmt.Errorf("CONNS: %w", err)
			}
			conns = append(conns, n)
		}
	}
	warmed := map[string]bool{}
	for rep := range r.repeats {
		for _, n := range conns {
			for _, t := range rotate(r.smallTargets(), rep+n) {
				args := r.wrkArgs(t, "/small")
				if key := fmt.Sprint(t, n); !warmed[key] {
					warmed[key] = true
					var w cell
					if err := r.wrk(&w, n, time.Second, args); err != nil {
						return err
					}
				}
				c := cell{scenario: "small", target: t, conns: n, rep: rep}
				m := r.begin(r.targets[t])
				if err := r.wrk(&c, n, r.dur, args); err != nil {
					return err
				}
				m.end(&c)
				r.record(c)
			}
		}
	}
	return nil
}

// post is the agent's usual call: a POST with a 1 KiB JSON body, 16
// connections, the same targets as small.
func (r *runner) post() error {
	body := `{"model":"bench","messages":[{"role":"user","content":"` + strings.Repeat("x", 950) + `"}]}`
	script := r.path("post.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = %q\nwrk.headers[\"Content-Type\"] = \"application/json\"\n", body)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return err
	}
	for rep := range r.repeats {
		for _, t := range rotate(r.smallTargets(), rep+1) {
			args := append([]string{"-s", script}, r.wrkArgs(t, "/small")...)
			if rep == 0 {
				var w cell
				if err := r.wrk(&w, 16, time.Second, args); err != nil {
					return err
				}
			}
			c := cell{scenario: "post", target: t, conns: 16, rep: rep}
			m := r.begin(r.targets[t])
			if err := r.wrk(&c, 16, r.dur, args); err != nil {
				return err
			}
			m.end(&c)
			r.record(c)
		}
	}
	return nil
}

func (r *runner) stream() error {
	targets := []string{"botbox", "nginx", "floor", "direct"}
	for _, v := range r.variants {
		targets = append(targets, v.name)
	}
	for rep := range r.repeats {
		for _, t := range rotate(targets, rep) {
			w := r.wrkArgs(t, "/stream")
			args := []string{"-c", loadCPU, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{time_total}", "--cacert", r.path("ca.crt")}
			for i := 0; i+1 < len(w); i += 2 {
				args = append(args, w[i], w[i+1])
			}
			args = append(args, w[len(w)-1])
			c := cell{scenario: "stream", target: t, conns: 1, rep: rep, requests: 1}
			m := r.begin(r.targets[t])
			out, err := exec.Command("taskset", args...).Output()
			if err != nil {
				return fmt.Errorf("curl stream via %s: %v", t, err)
			}
			m.end(&c)
			var code string
			var size, secs float64
			_, _ = fmt.Sscanf(string(out), "%s %f %f", &code, &size, &secs)
			if code != "200" || size != 256<<20 {
				c.bad = fmt.Sprintf("HTTP %s, %.0f bytes", code, size)
			}
			if secs > 0 {
				c.mibps = size / (1 << 20) / secs
			}
			c.cpuUS /= 256 // per MiB
			c.originUS /= 256
			c.extra = "cpu_per=MiB"
			r.record(c)
		}
	}
	return nil
}

func (r *runner) interceptKeepAlive() error {
	targets := []string{"botbox", "nginx"}
	for rep := range r.repeats {
		for _, n := range []int{16, 128} {
			for _, t := range rotate(targets, rep+n) {
				port := map[string]int{"botbox": botboxIcptPort, "nginx": nginxTLSPort}[t]
				args := []string{"-H", "Host: localhost", "-H", "Authorization: " + clientAuth, fmt.Sprintf("https://localhost:%d/small", port)}
				if rep == 0 {
					var w cell
					if err := r.wrk(&w, n, time.Second, args); err != nil {
						return err
					}
				}
				c := cell{scenario: "intercept-keepalive", target: t, conns: n, rep: rep}
				m := r.begin(r.targets[t])
				if err := r.wrk(&c, n, r.dur, args); err != nil {
					return err
				}
				m.end(&c)
				r.record(c)
			}
		}
	}
	return nil
}

func (r *runner) loadclient(args ...string) (string, error) {
	cmd := exec.Command("taskset", append([]string{"-c", loadCPU, filepath.Join(r.bin, "loadclient")}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("loadclient %s: %v: %s", args[0], err, stderr.String())
	}
	if stderr.Len() > 0 {
		r.logf("loadclient %s: %s", args[0], strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (r *runner) interceptNewConn() error {
	cas := r.path("ca.crt") + "," + r.path("icpt-ca/ca.crt")
	targets := []string{"botbox", "nginx", "direct"}
	for rep := range r.repeats {
		for _, t := range rotate(targets, rep) {
			addr := map[string]string{"botbox": fmt.Sprint("127.0.0.1:", botboxIcptPort), "nginx": fmt.Sprint("127.0.0.1:", nginxTLSPort), "direct": fmt.Sprint("127.0.0.1:", originPort)}[t]
			auth := clientAuth
			if t == "direct" {
				auth = "Bearer " + token
			}
			c := cell{scenario: "intercept-newconn", target: t, conns: 16, rep: rep}
			m := r.begin(r.targets[t])
			out, err := r.loadclient("newconn", "-addr", addr, "-sni", "localhost", "-host", "localhost", "-auth", auth, "-ca", cas, "-verify=false", "-c", "16", "-d", r.dur.String())
			if err != nil {
				return err
			}
			v := kv(out)
			c.requests, c.rps, c.p50, c.p99 = int64(v["requests"]), v["rps"], v["p50_us"], v["p99_us"]
			m.end(&c)
			if v["errors"] > 0 || v["non2xx"] > 0 || c.requests == 0 {
				c.bad = strings.TrimSpace(out)
			}
			r.record(c)
		}
	}
	return nil
}

func (r *runner) firstSeenSNI() error {
	if err := r.startBotbox("botbox-sni", "", sniPort, sniMetrics, sniIcptPort, true); err != nil {
		return err
	}
	defer r.stop(r.targets["botbox-sni"])
	n := map[bool]string{true: "100", false: "200"}[r.quick]
	cas := r.path("icpt-ca/ca.crt")
	for rep := range r.repeats {
		c := cell{scenario: "first-seen-sni", target: "botbox", conns: 1, rep: rep}
		m := r.begin(r.targets["botbox-sni"])
		out, err := r.loadclient("sni", "-addr", fmt.Sprint("127.0.0.1:", sniIcptPort), "-host", "localhost", "-ca", cas, "-n", n)
		if err != nil {
			return err
		}
		v := kv(out)
		c.requests = int64(v["fresh"] + v["cached"])
		c.p50, c.p99 = v["fresh_p50_us"], v["fresh_p99_us"]
		m.end(&c)
		c.extra = strings.TrimSpace(out)
		if v["errors"] > 0 {
			c.bad = "errors"
		}
		r.record(c)
	}
	return nil
}

func (r *runner) idle() error {
	n := "10000"
	targets := []string{"botbox", "nginx", "floor"}
	for _, v := range r.variants {
		if v.name != scrubOffName {
			// A/B variants (another binary, http1_engine: net/http) keep
			// idle connections their own way; the scrub-off one does not.
			targets = append(targets, v.name)
		}
	}
	for _, t := range targets {
		p := r.targets[t]
		pids := tree(p.cmd.Process.Pid)
		before := statusKB(pids, "VmRSS")
		cmd := exec.Command("taskset", "-c", loadCPU, filepath.Join(r.bin, "loadclient"), "idle",
			"-addr", fmt.Sprint("127.0.0.1:", r.port(t)), "-host", fmt.Sprintf("127.0.0.1:%d", originPort), "-n", n)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		time.Sleep(2 * time.Second) // let the server settle (GC, idle state)
		after := statusKB(pids, "VmRSS")
		_, _ = io.WriteString(stdin, "done\n")
		_ = stdin.Close()
		_ = cmd.Wait()
		v := kv(line)
		c := cell{scenario: "idle-10k", target: t, conns: int(v["n"]), peakMiB: float64(statusKB(pids, "VmHWM")) / 1024,
			extra: fmt.Sprintf("rss_before_kib=%d rss_after_kib=%d kib_per_conn=%.2f", before, after, float64(after-before)/max(v["n"], 1))}
		if v["errors"] > 0 || !strings.HasPrefix(line, "READY") {
			c.bad = strings.TrimSpace(line + " " + stderr.String())
		}
		r.record(c)
		time.Sleep(time.Second)
	}
	return nil
}
