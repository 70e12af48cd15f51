package localmode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/server"
)

// benchConfig writes a config allowing a plain-HTTP origin at origin
// (upstream_tls: false, loopback opened in the address guard) and returns
// its path.
func benchConfig(b *testing.B, origin *httptest.Server) string {
	b.Helper()
	dir := b.TempDir()
	host, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	secrets := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "api-key"), []byte("sk-bench-0123456789abcdef"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := fmt.Sprintf(`secrets_dir: %q
log_level: warn
address_guard:
  allowed_cidrs: ["127.0.0.1/32"]
egress_policy:
  rules:
    - host: %s
      action: allow
      allowed_ports: [%s]
      upstream_tls: false
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
`, secrets, host, port)
	path := filepath.Join(dir, "botbox.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

func benchOrigin(b *testing.B) *httptest.Server {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkStartup is the budget of issue 22: `botbox exec -- true`
// (exec) against `unshare -Urnm --pid --fork true` (unshare) plus BotBox's
// own start-up (server: config, secrets, interception CA, every listener
// bound, then stopped). The ratio exec / (unshare + server) is reported in
// docs/performance.md; the target is at most 1.5.
func BenchmarkStartup(b *testing.B) {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		b.Skipf("no user namespaces: %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		b.Skipf("unshare: %v", err)
	}
	path := benchConfig(b, benchOrigin(b))
	run := &runDir{private: b.TempDir(), public: b.TempDir()}
	cells := []struct {
		name string
		once func(b *testing.B)
	}{
		{"exec", func(b *testing.B) { startupExec(b, path) }},
		{"unshare", startupUnshare},
		{"server", func(b *testing.B) { startupServer(b, path, run) }},
	}
	for _, c := range cells {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.once(b)
			}
		})
	}
	// interleaved: one of each per iteration, so a change of the machine's
	// load hits the three alike; reported as medians and their ratio.
	b.Run("interleaved", func(b *testing.B) {
		var d [3][]time.Duration
		for b.Loop() {
			for i, c := range cells {
				t0 := time.Now()
				c.once(b)
				d[i] = append(d[i], time.Since(t0))
			}
		}
		med := func(v []time.Duration) float64 {
			s := slices.Clone(v)
			slices.Sort(s)
			return float64(s[len(s)/2])
		}
		b.ReportMetric(med(d[0])/1e6, "exec-ms")
		b.ReportMetric(med(d[1])/1e6, "unshare-ms")
		b.ReportMetric(med(d[2])/1e6, "server-ms")
		b.ReportMetric(med(d[0])/(med(d[1])+med(d[2])), "ratio")
	})
}

func startupExec(b *testing.B, path string) {
	st := Run(context.Background(), Options{ConfigPath: path, Quiet: true, Argv: []string{"true"},
		Environ: []string{"PATH=/usr/bin:/bin"}, Getenv: func(string) string { return "" },
		Stdin: nil, Stdout: os.Stdout, Stderr: os.Stderr})
	if st.Code != 0 || st.Signal != 0 {
		b.Fatalf("botbox exec -- true: %+v", st)
	}
}

func startupUnshare(b *testing.B) {
	if out, err := exec.Command("unshare", "-Urnm", "--pid", "--fork", "true").CombinedOutput(); err != nil {
		b.Fatalf("unshare: %v: %s", err, out)
	}
}

// startupServer is BotBox's own start-up as local mode does it (config,
// the run's CA and bundle, secrets, every listener bound, then stopped),
// on the host's loopback.
func startupServer(b *testing.B, path string, run *runDir) {
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := prepareConfig(cfg, Options{}, run); err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(cfg, server.Options{
		Logger: slog.New(slog.DiscardHandler),
		Listen: func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") },
		ListenPacket: func(network, _ string) (net.PacketConn, error) {
			return net.ListenPacket(network, "127.0.0.1:0")
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = os.Remove(filepath.Join(run.private, "ca.crt")) // made again next time, as each exec does
	_ = os.Remove(filepath.Join(run.private, "ca.key"))
	_ = os.Remove(filepath.Join(run.public, "ca-bundle.pem"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	if _, err := srv.Addrs(); err != nil {
		b.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRequest is the same-run A/B of one plain-HTTP request with a
// credential injected, on a kept-alive connection: through local mode
// (the client's socket in the command's network namespace, dialling an
// outside address on port 80 that the namespace's rules redirect to
// BotBox's listener there) and through BotBox listening on the host's
// loopback, as the sidecar's does.
func BenchmarkRequest(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: the client enters the command's network namespace (setns)")
	}
	origin := benchOrigin(b)
	path := benchConfig(b, origin)
	target := "http://" + origin.Listener.Addr().String() + "/bench"
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Timeouts.Shutdown = shutdownTimeout
	serve := func(b *testing.B, opts server.Options) {
		opts.Logger = slog.New(slog.DiscardHandler)
		srv, err := server.New(cfg, opts)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		b.Cleanup(func() { cancel(); <-done })
		if _, err := srv.Addrs(); err != nil {
			b.Fatal(err)
		}
	}
	get := func(b *testing.B, c *http.Client) {
		resp, err := c.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	// local: BotBox serving listeners made in a sandbox whose command
	// sleeps; the client's socket is made in that namespace and dials
	// 203.0.113.80:80 (TEST-NET-3), which only the namespace's redirect
	// makes reach BotBox; the Host header names the origin.
	local := func(b *testing.B) *http.Client {
		sb, err := Start(Spec{Redirects: map[uint16]uint16{80: cfg.ListenPort}, TTY: -1, Stdout: os.Stdout, Stderr: os.Stderr, Listen: serverSockets(cfg)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(sb.Kill)
		serve(b, server.Options{Listen: sb.Listen, ListenPacket: sb.ListenPacket})
		if err := sb.Begin([]string{"sleep", "3600"}, []string{"PATH=/usr/bin:/bin"}); err != nil {
			b.Fatal(err)
		}
		netns := "/proc/" + strconv.Itoa(sb.cmd.Process.Pid) + "/ns/net"
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialIn(ctx, netns, "203.0.113.80:80")
			},
		}}
	}
	// sidecar: BotBox's plain listener on the host's loopback.
	sidecar := func(b *testing.B) *http.Client {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := ln.Addr().String()
		first := true
		serve(b, server.Options{
			Listen: func(network, a string) (net.Listener, error) {
				if first && network == "tcp" && a == net.JoinHostPort("127.0.0.1", strconv.Itoa(int(cfg.ListenPort))) {
					first = false
					return ln, nil
				}
				return net.Listen(network, "127.0.0.1:0")
			},
			ListenPacket: func(network, _ string) (net.PacketConn, error) { return net.ListenPacket(network, "127.0.0.1:0") },
		})
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
		}}
	}
	for _, c := range []struct {
		name string
		make func(*testing.B) *http.Client
	}{{"local", local}, {"sidecar", sidecar}} {
		b.Run(c.name, func(b *testing.B) {
			cl := c.make(b)
			for b.Loop() {
				get(b, cl)
			}
		})
	}
	// interleaved: one request of each per iteration, medians and their
	// ratio (local / sidecar), so the machine's load hits both alike.
	b.Run("interleaved", func(b *testing.B) {
		clients := []*http.Client{local(b), sidecar(b)}
		var d [2][]time.Duration
		for b.Loop() {
			for i, cl := range clients {
				t0 := time.Now()
				get(b, cl)
				d[i] = append(d[i], time.Since(t0))
			}
		}
		med := func(v []time.Duration) float64 {
			s := slices.Clone(v)
			slices.Sort(s)
			return float64(s[len(s)/2])
		}
		b.ReportMetric(med(d[0])/1e3, "local-us")
		b.ReportMetric(med(d[1])/1e3, "sidecar-us")
		b.ReportMetric(med(d[0])/med(d[1]), "ratio")
	})
}

// dialIn connects to addr from inside the network namespace netns: the
// socket is made on a thread moved into it, and keeps it.
func dialIn(ctx context.Context, netns, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies in the namespace
		f, err := os.Open(netns)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", netns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
