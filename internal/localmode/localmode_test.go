package localmode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/server"
	"github.com/botbox/botbox/internal/telemetry"
)

func TestParseTCPPorts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		have []uint16
		want []uint16
		err  string
	}{
		{in: "8080", want: []uint16{8080}},
		{in: "3000, 8000,9000", want: []uint16{3000, 8000, 9000}},
		{in: "3000", have: []uint16{8000}, want: []uint16{8000, 3000}},
		{in: "65535", want: []uint16{65535}},
		{in: "0", err: "not a port"},
		{in: "65536", err: "not a port"},
		{in: "-1", err: "not a port"},
		{in: "+80", err: "not a port"},
		{in: "", err: "not a port"},
		{in: "8080,", err: "not a port"},
		{in: "http", err: "not a port"},
		{in: "80", err: "port 80"},
		{in: "443", err: "443: HTTPS interception"},
		{in: "53", err: "53: the DNS guard"},
		{in: "8080,8080", err: "given twice"},
		{in: "8080", have: []uint16{8080}, err: "given twice"},
	} {
		got, err := ParseTCPPorts(tc.in, tc.have)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTCPPorts(%q, %v) = %v, %v; want error %q", tc.in, tc.have, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTCPPorts(%q, %v) = %v, %v; want %v", tc.in, tc.have, got, err, tc.want)
		}
	}
}

func FuzzParseTCPPorts(f *testing.F) {
	for _, s := range []string{"8080", "1,2,3", " 9000 ", "80", "0", "65536", "a,b", ",", "443,8443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTCPPorts(s, nil)
		if err != nil {
			return
		}
		seen := map[uint16]bool{}
		for _, p := range got {
			if p == 0 || p == 80 || p == 443 || p == 53 || seen[p] {
				t.Fatalf("ParseTCPPorts(%q) = %v: a reserved, zero or repeated port", s, got)
			}
			seen[p] = true
		}
		again, err := ParseTCPPorts(FormatTCPPorts(got), nil)
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip of %v: %v, %v", got, again, err)
		}
	})
}

func TestDiagnoseUserNS(t *testing.T) {
	t.Parallel()
	base := fmt.Errorf("fork/exec /usr/bin/botbox: %w", syscall.EPERM)
	for _, tc := range []struct {
		name     string
		settings map[string]string
		want     []string // in the message; nil: err unchanged
	}{
		{"debian clone off", map[string]string{sysctlUnprivClone: "0", sysctlMaxUserNS: "100"},
			[]string{"kernel.unprivileged_userns_clone = 0", "sysctl -w kernel.unprivileged_userns_clone=1", "run botbox exec as root"}},
		{"no namespaces allowed", map[string]string{sysctlMaxUserNS: "0"},
			[]string{"user.max_user_namespaces = 0", "sysctl -w user.max_user_namespaces=15000", "run botbox exec as root"}},
		{"ubuntu apparmor", map[string]string{sysctlMaxUserNS: "100", sysctlAppArmorUser: "1"},
			[]string{"kernel.apparmor_restrict_unprivileged_userns = 1", "AppArmor profile", "apparmor_restrict_unprivileged_userns=0", "run botbox exec as root"}},
		{"all allowed", map[string]string{sysctlUnprivClone: "1", sysctlMaxUserNS: "100", sysctlAppArmorUser: "0"}, []string{"seccomp profile"}},
		{"nothing readable", map[string]string{}, []string{"seccomp profile", "seccomp=unconfined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diagnoseWith(base, func(p string) string { return tc.settings[p] })
			if tc.want == nil {
				if got != base {
					t.Fatalf("got %v, want the error unchanged", got)
				}
				return
			}
			if !errors.Is(got, ErrUserNamespaces) || !strings.Contains(got.Error(), base.Error()) {
				t.Fatalf("got %v, want ErrUserNamespaces wrapping the cause", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, got)
				}
			}
		})
	}
	// An error that is no refusal, with every setting allowing, is returned
	// as it is.
	other := errors.New("fork/exec /usr/bin/botbox: no such file or directory")
	if got := diagnoseWith(other, func(string) string { return "" }); got != other {
		t.Errorf("diagnoseWith(%v) = %v, want it unchanged", other, got)
	}
}

func decision(h slog.Handler, host, dec, reason string, repeated int) {
	r := slog.NewRecord(time.Now(), slog.LevelInfo, decisionMessage, 0)
	r.AddAttrs(slog.String(telemetry.KeyHost, host), slog.String(telemetry.KeyDecision, dec))
	if reason != "" {
		r.AddAttrs(slog.String(telemetry.KeyReason, reason))
	}
	if repeated > 0 {
		r.AddAttrs(slog.Int(telemetry.KeyRepeated, repeated))
	}
	_ = h.Handle(context.Background(), r)
}

func TestSummary(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	s := NewSummary(telemetry.NewLogger(&log, nil).Handler())
	h := s.WithAttrs([]slog.Attr{slog.String(telemetry.KeyTarget, telemetry.TargetProxy)})
	decision(h, "api.example.com", telemetry.DecisionAllow, "", 0)
	decision(h, "api.example.com", telemetry.DecisionAllow, "", 0)
	decision(h, "evil.test", telemetry.DecisionDeny, "default_deny", 0)
	decision(h, "evil.test", telemetry.DecisionDeny, "default_deny", 4) // a repeat summary: 4 more
	decision(h, "api.example.com", telemetry.DecisionDeniedRoute, "route_not_allowed", 0)
	decision(h, "x\x1b[2Jy.test", telemetry.DecisionReportDeny, "default_deny", 0)
	var out bytes.Buffer
	s.Write(&out)
	want := strings.Join([]string{
		"botbox exec: 2 requests allowed, 7 denied",
		"  api.example.com                              2 allowed     1 denied  first: denied_route (route_not_allowed)",
		"  evil.test                                    0 allowed     5 denied  first: deny (default_deny)",
		`  x\x1b[2Jy.test                               0 allowed     1 denied  first: report_deny (default_deny)`,
		"botbox exec: report mode: 1 of the denied requests were forwarded without credentials",
		"botbox exec: first denial: evil.test: deny (default_deny)",
		""}, "\n")
	if out.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out.String(), want)
	}
	if n := strings.Count(log.String(), `"message":"proxy decision"`); n != 6 {
		t.Errorf("the log got %d decision lines, want all 6 passed on:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `"target":"botbox::proxy"`) {
		t.Errorf("WithAttrs lost the logger's attributes:\n%s", log.String())
	}
	var empty bytes.Buffer
	NewSummary(nil).Write(&empty)
	if !strings.Contains(empty.String(), "no HTTP(S) request") {
		t.Errorf("empty summary: %q", empty.String())
	}
}

func TestSummaryBoundsHosts(t *testing.T) {
	t.Parallel()
	s := NewSummary(nil)
	for i := range maxSummaryHosts + 10 {
		decision(s, "h"+strconv.Itoa(i)+".test", telemetry.DecisionDeny, "default_deny", 0)
	}
	var out bytes.Buffer
	s.Write(&out)
	if !strings.Contains(out.String(), fmt.Sprintf("(%d more hosts)", maxSummaryHosts)) || !strings.Contains(out.String(), strconv.Itoa(maxSummaryHosts+10)+" denied") {
		t.Errorf("summary of %d hosts does not fold the rest:\n%s", maxSummaryHosts+10, tail(out.String()))
	}
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"", "api.example.com", "\x1b]0;pwned\x07", "é.test", "\xff\xfe", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := printable(s)
		for _, r := range p {
			if r > unicode.MaxASCII || unicode.IsControl(r) {
				t.Fatalf("printable(%q) = %q holds %q", s, p, r)
			}
		}
	})
}

// TestCommandFilter runs the seccomp program on a small interpreter of
// the classic BPF it uses: the refusals (foreign ABI, x32, TIOCSTI and
// TIOCLINUX with or without high bits, AF_VSOCK, io_uring) and what stays
// allowed (other ioctls, other socket families, ordinary calls).
func TestCommandFilter(t *testing.T) {
	t.Parallel()
	arch, err := auditArch()
	if err != nil {
		t.Fatalf("this build has no command filter: %v", err)
	}
	prog := commandFilter(arch)
	const refuse, allow = unix.SECCOMP_RET_ERRNO | errEPERM, unix.SECCOMP_RET_ALLOW
	for _, tc := range []struct {
		name string
		arch uint32
		nr   uint32
		args [6]uint64
		want uint32
	}{
		{"read", arch, unix.SYS_READ, [6]uint64{}, allow},
		{"ioctl TCGETS", arch, unix.SYS_IOCTL, [6]uint64{0, unix.TCGETS}, allow},
		{"ioctl TIOCSTI", arch, unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSTI}, refuse},
		{"ioctl TIOCSTI, high bits set", arch, unix.SYS_IOCTL, [6]uint64{0, 1<<32 | unix.TIOCSTI}, refuse},
		{"ioctl TIOCLINUX", arch, unix.SYS_IOCTL, [6]uint64{0, unix.TIOCLINUX}, refuse},
		{"socket AF_INET6", arch, unix.SYS_SOCKET, [6]uint64{unix.AF_INET6, unix.SOCK_STREAM}, allow},
		{"socket AF_UNIX", arch, unix.SYS_SOCKET, [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}, allow},
		{"socket AF_VSOCK", arch, unix.SYS_SOCKET, [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, refuse},
		{"socket AF_VSOCK, high bits set", arch, unix.SYS_SOCKET, [6]uint64{1<<40 | unix.AF_VSOCK, unix.SOCK_STREAM}, refuse},
		{"io_uring_setup", arch, unix.SYS_IO_URING_SETUP, [6]uint64{4}, refuse},
		{"io_uring_enter", arch, unix.SYS_IO_URING_ENTER, [6]uint64{}, refuse},
		{"io_uring_register", arch, unix.SYS_IO_URING_REGISTER, [6]uint64{}, refuse},
		{"x32", arch, x32Bit | unix.SYS_READ, [6]uint64{}, refuse},
		{"foreign ABI", unix.AUDIT_ARCH_I386, 3, [6]uint64{}, refuse},
	} {
		if got := runBPF(t, prog, tc.nr, tc.arch, tc.args); got != tc.want {
			t.Errorf("%s: %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

// runBPF interprets the classic BPF subset commandFilter uses (absolute
// word loads, JEQ and JSET with constants, constant returns) over a
// little-endian struct seccomp_data.
func runBPF(t *testing.T, prog []unix.SockFilter, nr, arch uint32, args [6]uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[offNR:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[ins.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			hit := acc == ins.K
			if ins.Code&0xf0 == unix.BPF_JSET {
				hit = acc&ins.K != 0
			}
			off := ins.Jf
			if hit {
				off = ins.Jt
			}
			pc += int(off)
		case unix.BPF_RET | unix.BPF_K:
			return ins.K
		default:
			t.Fatalf("instruction %d: code %#x not interpreted", pc, ins.Code)
		}
	}
	t.Fatal("the program ran past its end")
	return 0
}

func TestCommandEnvAndHiddenPaths(t *testing.T) {
	t.Parallel()
	env := commandEnv([]string{"HOME=/home/u", "SSL_CERT_FILE=/etc/mine.pem", "OPENAI_API_KEY=sk-real", "PATH=/bin"}, "/run/b/ca-bundle.pem",
		[]placeholder.Entry{{Ref: "openai-api-key", Placeholder: "sk-placeholder", Current: true}, {Ref: "openai-api-key", Placeholder: "sk-retired"}})
	want := []string{"HOME=/home/u", "PATH=/bin"}
	for _, k := range slices.Sorted(slices.Values(append([]string{"OPENAI_API_KEY"}, TrustVariables...))) {
		v := "/run/b/ca-bundle.pem"
		if k == "OPENAI_API_KEY" {
			v = "sk-placeholder"
		}
		want = append(want, k+"="+v)
	}
	if !slices.Equal(env, want) {
		t.Errorf("commandEnv = %q\nwant %q", env, want)
	}

	dir := t.TempDir()
	real := filepath.Join(dir, "secrets")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	got, err := resolveHidden([]string{link, real, filepath.Join(dir, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{real, filepath.Join(dir, "missing")}) {
		t.Errorf("resolveHidden = %q, want the symlink resolved, duplicates dropped, a missing path kept", got)
	}
}

func TestRemoveStale(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dead := filepath.Join(base, "botbox-exec-2147483646-abc")
	live := filepath.Join(base, "botbox-exec-"+strconv.Itoa(os.Getpid())+"-abc")
	other := filepath.Join(base, "botbox-exec-notapid-abc")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "private"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	removeStale(base)
	for d, want := range map[string]bool{dead: false, live: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}

// TestRunDirPrivateBase: a run's private directory lies in the user's
// directory of every run's private directories, which hiddenPaths covers
// whole (another run's keys are hidden too); that directory is made 0700
// and refused when it is a link or open to others; removing the run
// leaves it, empty.
func TestRunDirPrivateBase(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return base
		}
		return ""
	}
	run, err := newRunDir(getenv)
	if err != nil {
		t.Fatal(err)
	}
	wantBase := filepath.Join(base, privateBaseName())
	if run.privateBase != wantBase || filepath.Dir(run.private) != wantBase || filepath.Base(run.private) != filepath.Base(run.root) {
		t.Errorf("private %s in %s, want %s/%s", run.private, run.privateBase, wantBase, filepath.Base(run.root))
	}
	if fi, err := os.Stat(wantBase); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("private base: %v %v, want mode 0700", fi, err)
	}
	hide, err := hiddenPaths(&config.Config{}, Options{ConfigPath: filepath.Join(base, "config.yaml")}, run)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(hide, wantBase) {
		t.Errorf("hiddenPaths = %q, want the private base %s covered whole", hide, wantBase)
	}
	run.remove()
	if entries, err := os.ReadDir(wantBase); err != nil || len(entries) != 0 {
		t.Errorf("after remove the private base holds %v (%v), want it empty", entries, err)
	}
	if _, err := os.Stat(run.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run root left: %v", err)
	}

	for name, mk := range map[string]func(p string) error{
		"a link":         func(p string) error { return os.Symlink(t.TempDir(), p) },
		"open to others": func(p string) error { return errors.Join(os.Mkdir(p, 0o755), os.Chmod(p, 0o755)) },
		"a file":         func(p string) error { return os.WriteFile(p, nil, 0o600) },
	} {
		p := filepath.Join(t.TempDir(), "private")
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		if _, err := ensurePrivateBase(p); err == nil {
			t.Errorf("a private base that is %s was accepted", name)
		}
	}
}

func TestSessionBusPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		runtime, address string
		want             []string
	}{
		{"", "", nil},
		{"relative", "", nil},
		{"/run/user/1000", "", []string{"/run/user/1000/bus", "/run/user/1000/systemd"}},
		{"/run/user/1000", "unix:path=/run/user/1000/bus", []string{"/run/user/1000/bus", "/run/user/1000/systemd", "/run/user/1000/bus"}},
		{"", "unix:abstract=/tmp/dbus-x,guid=ab;unix:path=/tmp/my%20bus,guid=ab;tcp:host=h,port=1;unix:path=rel", []string{"/tmp/my bus"}},
	} {
		env := map[string]string{"XDG_RUNTIME_DIR": tc.runtime, "DBUS_SESSION_BUS_ADDRESS": tc.address}
		if got := sessionBusPaths(func(k string) string { return env[k] }); !slices.Equal(got, tc.want) {
			t.Errorf("XDG_RUNTIME_DIR=%q DBUS_SESSION_BUS_ADDRESS=%q: %q, want %q", tc.runtime, tc.address, got, tc.want)
		}
	}
}

func TestChannelPassesDescriptors(t *testing.T) {
	t.Parallel()
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := newChannel(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := newChannel(b)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.c.Close()
	defer cb.c.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.send(reply{Kind: "socket"}, int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var r reply
	got, err := cb.recv(&r)
	if err != nil || got == nil || r.Kind != "socket" {
		t.Fatalf("recv: %v %v %+v", got, err, r)
	}
	ln2, err := net.FileListener(got)
	got.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if ln2.Addr().String() != ln.Addr().String() {
		t.Errorf("received listener on %s, want %s", ln2.Addr(), ln.Addr())
	}
	// Garbage is an error, not a panic; the peer's close is errEOF.
	if _, _, err := ca.c.WriteMsgUnix([]byte("{not json"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.recv(&r); err == nil {
		t.Error("recv accepted a malformed message")
	}
	ca.c.Close()
	if _, err := cb.recv(&r); !errors.Is(err, errEOF) && !errors.Is(err, io.EOF) {
		t.Errorf("after close: %v, want errEOF", err)
	}
}

// userNamespaces reports why this machine cannot run the sandbox ("" when
// it can): the in-process test fails in CI instead of skipping.
func requireUserNamespaces(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no user namespaces in CI: %v", err)
		}
		t.Skipf("skipping: no user namespaces: %v", err)
	}
}

// TestSandbox runs the real helper (this test binary) in real namespaces:
// a listener made in the command's namespace is served here, a command
// connecting to any address on port 80 reaches it, the command runs
// without capabilities, and its exit status comes back.
func TestSandbox(t *testing.T) {
	t.Parallel()
	requireUserNamespaces(t)
	sb, err := Start(Spec{Redirects: map[uint16]uint16{80: 18080}, TTY: -1, Stdin: nil, Stdout: os.Stdout, Stderr: os.Stderr})
	if errors.Is(err, ErrUserNamespaces) && os.Getenv("CI") == "" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ln, err := sb.Listen("tcp", "127.0.0.1:18080")
	if err != nil {
		sb.Kill()
		if errors.Is(err, ErrUserNamespaces) && os.Getenv("CI") == "" {
			t.Skipf("skipping: %v", err) // e.g. Ubuntu's AppArmor restriction: the setup is refused
		}
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := sb.Listen("tcp", "127.0.0.1:18080"); err == nil {
		t.Error("a second listener on the same port was created")
	}
	accepted := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- err.Error()
			return
		}
		defer c.Close()
		b := make([]byte, 5)
		_, _ = io.ReadFull(c, b)
		accepted <- string(b)
	}()
	script := `grep -q '^CapEff:	0000000000000000' /proc/self/status || exit 10
exec 3<>/dev/tcp/203.0.113.7/80 2>/dev/null || exit 11
printf hello >&3; exit 3`
	if err := sb.Begin([]string{"bash", "-c", script}, []string{"PATH=/usr/bin:/bin"}); err != nil {
		t.Fatal(err)
	}
	var st ExitStatus
	for r := range sb.Replies() {
		if r.Kind == "exit" {
			st = ExitStatus{Code: r.Code, Signal: syscall.Signal(r.Signal)}
		}
	}
	sb.Close()
	if st.Code != 3 {
		t.Errorf("command exit status %+v, want 3 (10: capabilities, 11: no redirect)", st)
	}
	select {
	case got := <-accepted:
		if got != "hello" {
			t.Errorf("listener got %q, want hello", got)
		}
	case <-time.After(5 * time.Second):
		t.Error("the redirected connection never reached the listener")
	}
}

// TestReadmeAgentConfig: the coding-agent config of the README's "Local
// mode" section is valid.
func TestReadmeAgentConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Local mode")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no yaml block under \"## Local mode\"")
	}
	if _, err := config.Parse([]byte(block)); err != nil {
		t.Errorf("the README's local mode config is invalid:\n%v", err)
	}
}

// TestServerSocketsMatchTheServer: the sockets made during the setup are
// exactly those server.Run binds (else every bind would cost a round trip
// to the helper, or a socket would stay unused), for the default addresses
// and for explicit ones.
func TestServerSocketsMatchTheServer(t *testing.T) {
	t.Parallel()
	for _, extra := range []string{"", "listen_addr: 127.0.0.2\nmetrics_listen_addr: 0.0.0.0\n", "metrics_listen_addr: 10.1.2.3\n"} {
		dir := t.TempDir()
		cfg, err := config.Parse([]byte(extra + "secrets_dir: " + dir + "\negress_policy:\n  rules: []\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := prepareConfig(cfg, Options{}, &runDir{private: t.TempDir(), public: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		var got []SocketSpec
		var mu sync.Mutex
		record := func(network, addr string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, SocketSpec{network, addr})
		}
		srv, err := server.New(cfg, server.Options{
			Logger: slog.New(slog.DiscardHandler),
			// Real sockets on ephemeral ports that report the address
			// asked for (the server derives the [::1] port from it).
			Listen: func(network, addr string) (net.Listener, error) {
				record(network, addr)
				ln, err := net.Listen(network, "127.0.0.1:0")
				if err != nil {
					return nil, err
				}
				return namedListener{ln, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))}, nil
			},
			ListenPacket: func(network, addr string) (net.PacketConn, error) {
				record(network, addr)
				return net.ListenPacket(network, "127.0.0.1:0")
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		if _, err := srv.Addrs(); err != nil {
			t.Fatal(err)
		}
		cancel()
		<-done
		want := serverSockets(cfg)
		key := func(s SocketSpec) string { return s.Network + " " + s.Addr }
		if !slices.Equal(slices.Sorted(slices.Values(mapKeys(got, key))), slices.Sorted(slices.Values(mapKeys(want, key)))) {
			t.Errorf("config %q: server bound %v, serverSockets %v", extra, got, want)
		}
	}
}

// namedListener reports addr as its address.
type namedListener struct {
	net.Listener
	addr *net.TCPAddr
}

func (l namedListener) Addr() net.Addr { return l.addr }

func mapKeys(ss []SocketSpec, key func(SocketSpec) string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = key(s)
	}
	return out
}

func TestCheckHidden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hide []string
		wd   string
		ok   bool
	}{
		{[]string{"/home/u/.config/botbox/secrets", "/home/u/.config/botbox/agent.yaml"}, "/home/u/project", true},
		{[]string{"/home/u/secrets"}, "/home/u/secrets-of-the-project", true},
		{[]string{"/"}, "/home/u", false},
		{[]string{"/home/u/secrets"}, "/home/u/secrets", false},
		{[]string{"/home/u"}, "/home/u/project", false},
	} {
		if err := checkHidden(tc.hide, tc.wd); (err == nil) != tc.ok {
			t.Errorf("checkHidden(%q, %q) = %v, want ok=%v", tc.hide, tc.wd, err, tc.ok)
		}
	}
}

// TestSuperviseEndsWhenTheServerStops: a command still running when BotBox
// stops serving is not waited for: supervise returns ExitError at once
// (Run then kills the sandbox).
func TestSuperviseEndsWhenTheServerStops(t *testing.T) {
	t.Parallel()
	requireUserNamespaces(t)
	sb, err := Start(Spec{TTY: -1, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill()
	if err := sb.Begin([]string{"sh", "-c", "while :; do sleep 0.05; done"}, []string{"PATH=/usr/bin:/bin"}); err != nil {
		if errors.Is(err, ErrUserNamespaces) && os.Getenv("CI") == "" {
			t.Skipf("skipping: %v", err)
		}
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	done := make(chan ExitStatus, 1)
	go func() { done <- supervise(sb, -1, sigs, stopped) }()
	close(stopped)
	select {
	case st := <-done:
		if st.Code != ExitError || sb.Exited() {
			t.Errorf("supervise = %+v (helper exited: %v), want ExitError with the command still running", st, sb.Exited())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("supervise did not return when the server stopped")
	}
}
