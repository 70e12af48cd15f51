package grpctest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"

	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/proxy"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/server"
	"github.com/botbox/botbox/internal/telemetry"
	"github.com/botbox/botbox/internal/testutil/logcapture"
	"github.com/botbox/botbox/internal/testutil/testpki"
	"github.com/botbox/botbox/internal/upstream"
)

const (
	host       = "api.example.test"
	secret     = "sk-grpc-test-7f3a"
	injected   = "Bearer " + secret
	agentToken = "Bearer agent-placeholder"
	service    = "botbox.test.Echo"
)

// hangGuard bounds every call: it turns a hang of the proxy into a failed
// test and is never a performance assertion (each call ends in
// milliseconds when it works; the defect made it wait forever).
const hangGuard = 30 * time.Second

// rawCodec sends []byte messages as they are, so no protobuf code is
// needed. The client and the server force it; it is never registered.
type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case []byte:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case *[]byte:
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*p = data.Materialize()
	return nil
}

// echoService is the handler type of the hand-written service description;
// the origin's behaviour lives in the handler functions.
type echoService interface{}

// origin is a grpc-go server over TLS (its own CA) that answers only when
// BotBox injected the credential. cancelled receives the method name of a
// stream whose context ended before the handler returned by itself.
type origin struct {
	addr      string
	ca        *testpki.CA
	cancelled chan string
}

func checkCredential(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != injected {
		return status.Errorf(codes.Unauthenticated, "credential not injected (got %d authorization values)", len(got))
	}
	return nil
}

func startOrigin(t *testing.T) *origin {
	t.Helper()
	o := &origin{ca: testpki.NewCA(t, "grpc-origin-ca"), cancelled: make(chan string, 16)}
	desc := grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*echoService)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := checkCredential(ctx); err != nil {
					return nil, err
				}
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				return append([]byte("echo:"), in...), nil
			}},
			{MethodName: "Fail", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				return nil, status.Error(codes.NotFound, "requested failure")
			}},
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "Count", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				if err := checkCredential(ss.Context()); err != nil {
					return err
				}
				var in []byte
				if err := ss.RecvMsg(&in); err != nil {
					return err
				}
				n, err := strconv.Atoi(string(in))
				if err != nil {
					return status.Error(codes.InvalidArgument, "want a count")
				}
				for i := range n {
					if err := ss.SendMsg([]byte(fmt.Sprintf("n%d", i))); err != nil {
						return err
					}
				}
				return nil
			}},
			// Chat echoes every message. "end-ok" and "end-error" make the
			// server end the stream first, while the client's side is open;
			// "wait" blocks until the stream's context ends (cancellation).
			{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				if err := checkCredential(ss.Context()); err != nil {
					return err
				}
				for {
					var in []byte
					if err := ss.RecvMsg(&in); err == io.EOF {
						return nil
					} else if err != nil {
						return err
					}
					switch string(in) {
					case "end-ok":
						return nil
					case "end-error":
						return status.Error(codes.FailedPrecondition, "server ends the stream")
					case "wait":
						if err := ss.SendMsg([]byte("waiting")); err != nil {
							return err
						}
						<-ss.Context().Done()
						o.cancelled <- "Chat"
						return ss.Context().Err()
					}
					if err := ss.SendMsg(append([]byte("echo:"), in...)); err != nil {
						return err
					}
				}
			}},
		},
	}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{o.ca.Leaf(t, host)}})),
		grpc.ForceServerCodecV2(rawCodec{}),
	)
	srv.RegisterService(&desc, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return o
}

// dialOrigin is BotBox's upstream dialer in these tests: every upstream
// connection goes to the test origin.
func (o *origin) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, o.addr)
}

// policyYAML opens the loopback test origin to the address guard (on by
// default, it refuses loopback) and allows api.example.test.
const policyYAML = `
address_guard:
  allowed_cidrs: ["127.0.0.0/8", "::1"]
egress_policy:
  default_action: deny
  rules:
    - host: api.example.test
      action: allow
      header_rewrites:
        - name: Authorization
          value: "Bearer {value}"
          secret_ref: api-key
`

func secretsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ephemeral(network, addr string) (net.Listener, error) {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	return net.Listen(network, net.JoinHostPort(h, "0"))
}

// viaInterception runs a full Server (plain and interception listeners)
// and returns the interception listener's address and the CA its leaves
// are signed with.
func viaInterception(t *testing.T, o *origin, logs io.Writer) (addr string, ca *testpki.CA) {
	t.Helper()
	ca = testpki.NewCA(t, "botbox-grpc-interception-ca")
	return runServer(t, o, logs, ca).Intercept[0].String(), ca
}

// viaPlainListener runs a full Server and returns its plain listener's
// address and no CA: the app speaks plaintext gRPC (HTTP/2 with prior
// knowledge) to api.example.test:80, redirected there, so :authority is
// the origin host.
func viaPlainListener(t *testing.T, o *origin, logs io.Writer) (addr string, ca *testpki.CA) {
	t.Helper()
	return runServer(t, o, logs, testpki.NewCA(t, "botbox-grpc-interception-ca")).Proxy[0].String(), nil
}

// runServer runs a full Server with interception signed by ca and returns
// its listeners' addresses.
func runServer(t *testing.T, o *origin, logs io.Writer, ca *testpki.CA) server.Addrs {
	t.Helper()
	dir := t.TempDir()
	certPath, keyPath := ca.WriteFiles(t, dir)
	yaml := fmt.Sprintf(`
listen_port: 18080
metrics_port: 19090
secrets_dir: %s
shutdown_timeout_seconds: 5
%s
https_interception:
  enabled: true
  listen_port: 18443
  ca_cert_path: %s
  ca_key_path: %s
`, secretsDir(t), policyYAML, certPath, keyPath)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	srv, err := server.New(cfg, server.Options{
		Logger:        telemetry.NewLogger(logs, nil),
		Listen:        ephemeral,
		UpstreamRoots: o.ca.Pool(),
		Dial:          o.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Bound():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	addrs, err := srv.Addrs()
	if err != nil {
		t.Fatalf("Addrs: %v", err)
	}
	return addrs
}

// viaPlainHandler serves the plain listener's pipeline (Handler.Plain)
// behind a TLS HTTP/2 server of the test's own: the pipeline without the
// plain listener in front (viaPlainListener has the real one).
func viaPlainHandler(t *testing.T, o *origin, logs io.Writer) (addr string, ca *testpki.CA) {
	t.Helper()
	cfg, err := config.Parse([]byte("secrets_dir: " + secretsDir(t) + "\n" + policyYAML))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logger := telemetry.NewLogger(logs, nil)
	store, err := secrets.Open(secrets.Options{Dir: cfg.SecretsDir, Required: cfg.RequiredSecretRefs(), Debounce: cfg.SecretsReloadDebounce, Resync: time.Hour, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := upstream.NewTransport(upstream.Options{RootCAs: o.ca.Pool(), ConnectTimeout: 5 * time.Second, ResponseHeaderTimeout: cfg.Timeouts.UpstreamResponseHeader, Dial: o.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	h, err := proxy.New(proxy.Options{Config: cfg, Secrets: store, Transport: tr, Metrics: telemetry.NewMetrics(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ca = testpki.NewCA(t, "botbox-grpc-plain-ca")
	s := httptest.NewUnstartedServer(h.Plain())
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, host)}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.Listener.Addr().String(), ca
}

// client connects as an app whose connection to api.example.test (port
// 443, or 80 in plaintext when ca is nil) was sent to addr, trusting ca,
// with its own placeholder credential.
func client(t *testing.T, addr string, ca *testpki.CA) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if ca != nil {
		creds = credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: host})
	}
	cc, err := grpc.NewClient("passthrough:///"+host,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

var (
	chatDesc  = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}
	countDesc = &grpc.StreamDesc{StreamName: "Count", ServerStreams: true}
)

// callCtx is the context of one call: the app's placeholder credential
// (which BotBox must replace) and the hang guard.
func callCtx(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	return metadata.AppendToOutgoingContext(ctx, "authorization", agentToken), cancel
}

func recv(t *testing.T, s grpc.ClientStream, want string) {
	t.Helper()
	var got []byte
	if err := s.RecvMsg(&got); err != nil {
		t.Fatalf("RecvMsg: %v (want %q)", err, want)
	}
	if string(got) != want {
		t.Fatalf("RecvMsg = %q, want %q", got, want)
	}
}

func send(t *testing.T, s grpc.ClientStream, msg string) {
	t.Helper()
	if err := s.SendMsg([]byte(msg)); err != nil {
		t.Fatalf("SendMsg(%q): %v", msg, err)
	}
}

// notHung fails with a clear message when err is the hang guard's deadline.
func notHung(t *testing.T, err error) {
	t.Helper()
	if status.Code(err) == codes.DeadlineExceeded {
		t.Fatalf("call hung until the test's guard deadline: %v", err)
	}
}

func TestGRPCThroughBotBox(t *testing.T) {
	paths := []struct {
		name  string
		start func(*testing.T, *origin, io.Writer) (string, *testpki.CA)
	}{
		{"interception listener", viaInterception},
		{"plain listener, plaintext h2", viaPlainListener},
		{"plain handler over TLS h2", viaPlainHandler},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			o := startOrigin(t)
			logs := &logcapture.Buffer{}
			addr, ca := p.start(t, o, logs)
			cc := client(t, addr, ca)
			method := func(m string) string { return "/" + service + "/" + m }

			t.Run("unary", func(t *testing.T) {
				ctx, cancel := callCtx(t)
				defer cancel()
				var out []byte
				if err := cc.Invoke(ctx, method("Echo"), []byte("hi"), &out); err != nil {
					t.Fatalf("Echo: %v", err)
				}
				if string(out) != "echo:hi" {
					t.Fatalf("Echo = %q", out)
				}
			})

			t.Run("unary error status", func(t *testing.T) {
				ctx, cancel := callCtx(t)
				defer cancel()
				var out []byte
				err := cc.Invoke(ctx, method("Fail"), []byte("x"), &out)
				if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != "requested failure" {
					t.Fatalf("Fail: %v, want NotFound \"requested failure\"", err)
				}
			})

			t.Run("server stream", func(t *testing.T) {
				ctx, cancel := callCtx(t)
				defer cancel()
				s, err := cc.NewStream(ctx, countDesc, method("Count"))
				if err != nil {
					t.Fatal(err)
				}
				send(t, s, "5")
				if err := s.CloseSend(); err != nil {
					t.Fatal(err)
				}
				for i := range 5 {
					recv(t, s, fmt.Sprintf("n%d", i))
				}
				var extra []byte
				if err := s.RecvMsg(&extra); err != io.EOF {
					notHung(t, err)
					t.Fatalf("after 5 messages: %v, want io.EOF", err)
				}
			})

			t.Run("bidi client ends first", func(t *testing.T) {
				ctx, cancel := callCtx(t)
				defer cancel()
				s, err := cc.NewStream(ctx, chatDesc, method("Chat"))
				if err != nil {
					t.Fatal(err)
				}
				for i := range 5 {
					send(t, s, fmt.Sprintf("m%d", i))
					recv(t, s, fmt.Sprintf("echo:m%d", i))
				}
				if err := s.CloseSend(); err != nil {
					t.Fatal(err)
				}
				var extra []byte
				if err := s.RecvMsg(&extra); err != io.EOF {
					notHung(t, err)
					t.Fatalf("after CloseSend: %v, want io.EOF", err)
				}
			})

			// The defect of issue 10 item 2: the server ends the stream
			// while the client's side is still open; the client must get
			// the status at once, not at its deadline.
			for _, end := range []struct {
				msg  string
				code codes.Code
			}{{"end-ok", codes.OK}, {"end-error", codes.FailedPrecondition}} {
				t.Run("bidi server ends first "+end.code.String(), func(t *testing.T) {
					ctx, cancel := callCtx(t)
					defer cancel()
					s, err := cc.NewStream(ctx, chatDesc, method("Chat"))
					if err != nil {
						t.Fatal(err)
					}
					send(t, s, "m0")
					recv(t, s, "echo:m0")
					send(t, s, end.msg) // no CloseSend: the client's side stays open
					var extra []byte
					err = s.RecvMsg(&extra)
					notHung(t, err)
					if end.code == codes.OK {
						if err != io.EOF {
							t.Fatalf("server ended with OK: RecvMsg = %v, want io.EOF", err)
						}
						return
					}
					if st := status.Convert(err); st.Code() != end.code || st.Message() != "server ends the stream" {
						t.Fatalf("server ended with %v: RecvMsg = %v", end.code, err)
					}
				})
			}

			t.Run("client cancels bidi", func(t *testing.T) {
				ctx, cancel := callCtx(t)
				defer cancel()
				sctx, scancel := context.WithCancel(ctx)
				s, err := cc.NewStream(sctx, chatDesc, method("Chat"))
				if err != nil {
					t.Fatal(err)
				}
				send(t, s, "m0")
				recv(t, s, "echo:m0")
				send(t, s, "wait")
				recv(t, s, "waiting")
				scancel()
				var extra []byte
				if err := s.RecvMsg(&extra); status.Code(err) != codes.Canceled {
					t.Fatalf("after cancel: RecvMsg = %v, want Canceled", err)
				}
				// The cancellation crossed BotBox: the origin's stream ended.
				select {
				case m := <-o.cancelled:
					if m != "Chat" {
						t.Fatalf("origin reported %q", m)
					}
				case <-ctx.Done():
					t.Fatal("the origin's stream never saw the client's cancellation")
				}
			})

			if s := logs.String(); strings.Contains(s, secret) {
				t.Error("the secret value appears in BotBox's log")
			}
		})
	}
}
