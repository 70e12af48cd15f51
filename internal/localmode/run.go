package localmode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/mitm"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/secretref"
	"github.com/botbox/botbox/internal/server"
	"github.com/botbox/botbox/internal/telemetry"
)

// Exit statuses of Run besides the command's own.
const (
	ExitError    = 1   // BotBox could not confine or start the command
	ExitNotExec  = 126 // the command exists but cannot be executed
	ExitNotFound = 127 // the command was not found
)

// TrustVariables are the variables set to the run's trust bundle (the
// system roots plus the interception CA): OpenSSL and Go, Node, Python
// requests, curl, git.
var TrustVariables = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// systemBundles are where distributions keep the system's roots in one PEM
// file (Debian/Ubuntu/Alpine/Arch, Fedora/RHEL, openSUSE, macOS/BSD).
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// shutdownTimeout bounds BotBox's drain once the command has ended: its
// connections died with it.
const shutdownTimeout = 2 * time.Second

// Options are the inputs of one `botbox exec`.
type Options struct {
	ConfigPath string
	// LogPath keeps BotBox's log (JSON lines, decision lines included) in
	// this file ("" = none): `botbox suggest --log FILE` reads it.
	LogPath string
	// Report runs the policy in report mode.
	Report bool
	// Quiet drops the summary on stderr.
	Quiet bool
	// TCPPorts are more TCP destination ports redirected to the plain
	// listener (HTTP on them).
	TCPPorts []uint16
	// Argv is the command.
	Argv []string
	// Environ is the caller's environment, the base of the command's.
	Environ []string
	Getenv  func(string) string
	// Stdin, Stdout and Stderr are the command's.
	Stdin  *os.File
	Stdout *os.File
	Stderr *os.File
	// Messages receives botbox exec's own errors and the summary (nil:
	// Stderr).
	Messages io.Writer
}

// Run confines and runs one command, and returns the exit status botbox
// exec ends with: the command's, or ExitError and friends when it could
// not run. A command ended by a signal is returned as Status.Signal: the
// caller re-raises it (Raise). ctx only carries values: stopping is the
// command's business, signals are forwarded to it.
func Run(ctx context.Context, o Options) (st ExitStatus) {
	// BotBox's memory (the secrets, the CA key) is not readable through
	// ptrace or /proc/PID/mem by a process of the same user.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	msgs := o.Messages
	if msgs == nil {
		msgs = o.Stderr
	}
	fail := func(format string, a ...any) ExitStatus {
		fmt.Fprintf(msgs, "botbox exec: "+format+"\n", a...)
		return ExitStatus{Code: ExitError}
	}
	// The helper starts (the namespaces' creation, a Go binary's start-up)
	// while the configuration loads; it waits for Prepare.
	type spawned struct {
		sb  *Sandbox
		err error
	}
	spawnDone := make(chan spawned, 1)
	go func() {
		sb, err := Spawn(o.Stdin, o.Stdout, o.Stderr)
		spawnDone <- spawned{sb, err}
	}()
	var sb *Sandbox
	joined, started := false, false
	join := func() error {
		joined = true
		r := <-spawnDone
		sb = r.sb
		return r.err
	}
	defer func() {
		if !joined {
			_ = join()
		}
		switch {
		case sb == nil:
		case !started:
			sb.Kill()
		default:
			sb.Close()
		}
	}()
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		if ps := config.Problems(err); len(ps) > 0 {
			fmt.Fprintf(msgs, "%s: invalid configuration:\n", o.ConfigPath)
			for _, p := range ps {
				fmt.Fprintf(msgs, "  %v\n", p)
			}
			return ExitStatus{Code: ExitError}
		}
		return fail("%v", err)
	}
	if err := config.ApplyEnv(cfg, o.Getenv); err != nil {
		return fail("%v", err)
	}
	run, err := newRunDir(o.Getenv)
	if err != nil {
		return fail("%v", err)
	}
	defer run.remove()

	logFile := io.Discard
	if o.LogPath != "" {
		f, err := os.OpenFile(o.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return fail("opening the log file: %v", err)
		}
		defer f.Close()
		logFile = f
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	summary := NewSummary(telemetry.NewLogger(logFile, level).Handler())
	logger := slog.New(summary)

	// Key material (the run's CA) is made only once Spawn has made this
	// process non-dumpable again.
	if err := join(); err != nil {
		return fail("%v", err)
	}
	bundle, err := prepareConfig(cfg, o, run)
	if err != nil {
		return fail("%v", err)
	}
	hide, err := hiddenPaths(cfg, o, run)
	if err != nil {
		return fail("%v", err)
	}
	// BotBox reads secrets_dir again at every reload: by its symlink-free
	// path, the one covered and pinned, not through a link the command
	// could point elsewhere.
	if cfg.SecretsDir, err = resolvedPath(cfg.SecretsDir); err != nil {
		return fail("%v", err)
	}
	// A secrets_dir that does not exist cannot be covered, and the command
	// could create it with values of its own, which the next reload loads.
	if fi, err := os.Stat(cfg.SecretsDir); err != nil || !fi.IsDir() {
		return fail("secrets_dir %s must be an existing directory: botbox exec hides it from the command, which could otherwise make it with values of its own; create it first (mkdir -m 700 %s)", cfg.SecretsDir, cfg.SecretsDir)
	}
	tty := ForegroundTTY()
	spec := Spec{
		Hide:      hide,
		Redirects: map[uint16]uint16{80: cfg.ListenPort, 443: cfg.Interception.ListenPort},
		DNSPort:   cfg.DNSGuard.ListenPort,
		Stdin:     o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
		TTY: tty,
	}
	for _, p := range o.TCPPorts {
		spec.Redirects[p] = cfg.ListenPort
	}
	spec.Listen = serverSockets(cfg)
	if spec.Dir, err = os.Getwd(); err != nil {
		return fail("%v", err)
	}
	if err := checkHidden(hide, spec.Dir); err != nil {
		return fail("%v", err)
	}
	if err := sb.Prepare(spec); err != nil {
		return fail("%v", err)
	}
	srv, err := server.New(cfg, server.Options{
		Logger:       logger,
		Listen:       sb.Listen,
		ListenPacket: sb.ListenPacket,
		Getenv:       o.Getenv,
		LogLevel:     level,
	})
	if err != nil {
		return fail("%v", err)
	}
	srvCtx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	srvDone := make(chan error, 1)
	srvStopped := make(chan struct{}) // closed when srv.Run returns
	go func() { srvDone <- srv.Run(srvCtx); close(srvStopped) }()
	defer func() {
		stopServer()
		if err := <-srvDone; err != nil && st.Code == 0 && st.Signal == 0 {
			fmt.Fprintf(msgs, "botbox exec: %v\n", err)
		}
		if !o.Quiet {
			summary.Write(msgs)
		}
	}()
	var placeholders []placeholder.Entry
	if m := srv.Placeholders(); m != nil {
		placeholders = m.Table().Entries()
	}
	env := commandEnv(o.Environ, bundle, placeholders)
	// The environment travels with "start": the placeholders exist only
	// once the server has loaded the secrets.
	// Signals are caught from before the command starts: one sent to BotBox
	// once the command runs is the command's.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append(slices.Clone(forwarded), syscall.SIGCONT)...)
	defer signal.Stop(sigs)
	// The command may start before the server serves: its listeners exist
	// since the setup, and connections and datagrams wait in their queues.
	if err := sb.Begin(o.Argv, env); err != nil {
		var se *StartError
		if errors.As(err, &se) {
			fmt.Fprintf(msgs, "botbox exec: %v\n", se.Err)
			return ExitStatus{Code: se.Code}
		}
		return fail("%v", err)
	}
	if _, err := srv.Addrs(); err != nil {
		return fail("%v", err) // the deferred Kill ends the command
	}
	sb.CloseUnused()
	started = true
	st = supervise(sb, tty, sigs, srvStopped)
	if st.Code == ExitError && st.Signal == 0 && !sb.Exited() {
		// BotBox stopped serving (a listener failed for good): the command
		// is ended rather than left without its way out.
		fmt.Fprintln(msgs, "botbox exec: BotBox stopped serving; the command was ended")
		sb.Kill()
	}
	return st
}

// supervise forwards signals and the terminal's job control until the
// command ends, and returns its status.
func supervise(sb *Sandbox, tty int, sigs <-chan os.Signal, srvStopped <-chan struct{}) ExitStatus {
	stopped := false
	for {
		select {
		case <-srvStopped:
			return ExitStatus{Code: ExitError}
		case sig := <-sigs:
			s := sig.(syscall.Signal)
			if s == syscall.SIGCONT {
				if stopped {
					stopped = false
					fg := tty >= 0 && ForegroundTTY() == tty
					sb.Continue(fg)
				}
				continue
			}
			sb.Signal(s)
		case r, ok := <-sb.Replies():
			if !ok {
				<-sb.Done()
				return ExitStatus{Code: ExitError}
			}
			switch r.Kind {
			case "stopped":
				if tty < 0 {
					continue // not job control: whoever stopped it continues it
				}
				// Ctrl-Z: give the terminal back to the shell's job (this
				// process's group) and stop it, as the command did; the
				// shell's fg sends SIGCONT, handled above.
				stopped = true
				_ = TakeTerminal(tty)
				_ = unix.Kill(0, unix.SIGSTOP)
			case "exit":
				if tty >= 0 {
					_ = TakeTerminal(tty)
				}
				return ExitStatus{Code: r.Code, Signal: syscall.Signal(r.Signal)}
			}
		}
	}
}

// Raise ends this process as sig would (after the deferred clean-up has
// run): the shell sees the command's own death.
func Raise(sig syscall.Signal) {
	signal.Reset(sig)
	_ = unix.Kill(os.Getpid(), sig)
	time.Sleep(100 * time.Millisecond)
	os.Exit(128 + int(sig))
}

// serverSockets are the sockets server.Run binds for cfg, as it spells
// them (its bindAll, bindMetrics and bindDNS): each listener address,
// and [::1] beside a default 127.0.0.1, for the proxy, the interception
// listener and the DNS guard (UDP and TCP); the metrics address and
// 127.0.0.1 beside it. A socket the server does not ask for is closed at
// Begin; one it asks for that is not here is made on request.
func serverSockets(cfg *config.Config) []SocketSpec {
	v4, v6 := netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()
	addrs := func(a netip.Addr, explicit bool) []netip.Addr {
		if !explicit && a == v4 {
			return []netip.Addr{a, v6}
		}
		return []netip.Addr{a}
	}
	var out []SocketSpec
	add := func(network string, as []netip.Addr, port uint16) {
		for _, a := range as {
			out = append(out, SocketSpec{network, netip.AddrPortFrom(a, port).String()})
		}
	}
	metrics := cfg.MetricsListenAddr
	if !metrics.IsValid() {
		metrics = v4
	}
	add("tcp", []netip.Addr{metrics}, cfg.MetricsPort)
	if metrics != v4 && !metrics.IsUnspecified() {
		add("tcp", []netip.Addr{v4}, cfg.MetricsPort)
	}
	add("tcp", addrs(cfg.ListenAddr, cfg.ListenAddrExplicit), cfg.ListenPort)
	add("tcp", addrs(cfg.Interception.ListenAddr, cfg.Interception.ListenAddrExplicit), cfg.Interception.ListenPort)
	for _, a := range addrs(cfg.ListenAddr, cfg.ListenAddrExplicit) {
		add("udp", []netip.Addr{a}, cfg.DNSGuard.ListenPort)
		add("tcp", []netip.Addr{a}, cfg.DNSGuard.ListenPort)
	}
	return out
}

// runDir is this run's directories: root, with public (the trust bundle,
// visible to the command), and private (the CA key, the placeholder key)
// in privateBase, the user's directory of every run's private directory.
// Every run covers privateBase whole, not only its own private directory:
// the command of one run must not read the keys of another run of the
// same user, started before it or while it runs.
type runDir struct{ root, public, private, privateBase string }

// privateBaseName is privateBase under the run directories' base, one per
// user (the base may be a shared temporary directory). It does not match
// the botbox-exec-PID-* pattern of removeStale, and it is never removed:
// removing it while another run covers it would detach that run's cover,
// and the next run's private directory would be visible to that command.
func privateBaseName() string { return "botbox-private-" + strconv.Itoa(os.Getuid()) }

// newRunDir makes $XDG_RUNTIME_DIR/botbox-exec-PID-* (else under the temp
// directory), mode 0700, and its private directory of the same name in
// privateBase, after removing the directories of earlier runs whose
// BotBox is gone (a SIGKILL leaves them behind).
func newRunDir(getenv func(string) string) (*runDir, error) {
	base := getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(base); base == "" || err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	privateBase, err := ensurePrivateBase(filepath.Join(base, privateBaseName()))
	if err != nil {
		return nil, err
	}
	removeStale(base)
	removeStale(privateBase)
	root, err := os.MkdirTemp(base, "botbox-exec-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("making the run directory: %w", err)
	}
	r := &runDir{root: root, public: filepath.Join(root, "public"), private: filepath.Join(privateBase, filepath.Base(root)), privateBase: privateBase}
	for _, d := range []string{r.public, r.private} {
		if err := os.Mkdir(d, 0o700); err != nil {
			r.remove()
			return nil, fmt.Errorf("making the run directory: %w", err)
		}
	}
	return r, nil
}

// ensurePrivateBase makes dir (0700) unless it exists, and checks that it
// is a directory of this user, not a link, with no access for others.
func ensurePrivateBase(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("making the directory of the runs' private keys: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", fmt.Errorf("checking the directory of the runs' private keys: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s must be a directory of user %d with mode 0700 (not a link): remove it", dir, os.Getuid())
	}
	return dir, nil
}

func (r *runDir) remove() {
	removeTree(r.root)
	if r.private != "" {
		removeTree(r.private)
	}
}

// removeTree is os.RemoveAll of dir, which, if that fails, first gives
// every directory below dir back to its owner (0700): the command, as the
// same user, can make one unreadable or unwritable (chmod 000), and the
// run directory would stay behind for good, the next run's clean-up
// failing the same way. The chmods follow no symlink that is there when
// they look (Lstat); one that appears in between changes the mode of a
// directory of the user's, which the command could change itself.
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	ownDirs(dir)
	_ = os.RemoveAll(dir)
}

func ownDirs(dir string) {
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return
	}
	_ = os.Chmod(dir, 0o700)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			ownDirs(filepath.Join(dir, e.Name()))
		}
	}
}

// removeStale removes base/botbox-exec-PID-* directories of this user
// whose PID no longer runs.
func removeStale(base string) {
	matches, _ := filepath.Glob(filepath.Join(base, "botbox-exec-*-*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), "botbox-exec-")
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(m, &st) != nil || int(st.Uid) != os.Getuid() || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			removeTree(m)
		}
	}
}

// prepareConfig turns cfg into local mode's: interception always on (443
// has no other way out), with a CA made for this run unless the config
// names one; the DNS guard always on (without it no name resolves);
// placeholders in the private directory; report mode with --report; a
// short drain. It returns the trust bundle's path.
func prepareConfig(cfg *config.Config, o Options, run *runDir) (string, error) {
	if o.Report {
		cfg.Policy.Mode = config.ModeReport
	}
	cfg.Timeouts.Shutdown = min(cfg.Timeouts.Shutdown, shutdownTimeout)
	if !cfg.Interception.Enabled || cfg.Interception.CACertPath == "" {
		certPEM, keyPEM, err := mitm.NewCA("botbox exec "+time.Now().UTC().Format(time.DateTime), 30*24*time.Hour, time.Now())
		if err != nil {
			return "", err
		}
		cert, key := filepath.Join(run.private, mitm.CACertFile), filepath.Join(run.private, mitm.CAKeyFile)
		// Not mitm.WriteCA: the files live as long as this run, so they are
		// not fsynced (that was most of the start-up's disk time).
		if err := writeNew(key, keyPEM, 0o400); err != nil {
			return "", err
		}
		clear(keyPEM)
		if err := writeNew(cert, certPEM, 0o444); err != nil {
			return "", err
		}
		cfg.Interception.Enabled = true
		cfg.Interception.CACertPath, cfg.Interception.CAKeyPath = cert, key
	}
	cfg.DNSGuard.Enabled = true
	if cfg.Placeholders.Enabled {
		cfg.Placeholders.Dir = filepath.Join(run.private, "placeholders")
	}
	ports := map[uint16]string{}
	for _, p := range []struct {
		key  string
		port uint16
	}{{"listen_port", cfg.ListenPort}, {"metrics_port", cfg.MetricsPort}, {"https_interception.listen_port", cfg.Interception.ListenPort}, {"dns_guard.listen_port", cfg.DNSGuard.ListenPort}} {
		if other, taken := ports[p.port]; taken {
			return "", fmt.Errorf("%s and %s are both %d; local mode serves both in the command's namespace: give them different ports", other, p.key, p.port)
		}
		ports[p.port] = p.key
	}
	for _, p := range o.TCPPorts {
		if p == 443 || p == 53 {
			return "", fmt.Errorf("--tcp-ports %d: port %d is redirected already", p, p)
		}
	}
	caPEM, err := os.ReadFile(cfg.Interception.CACertPath)
	if err != nil {
		return "", fmt.Errorf("reading the interception CA certificate: %w", err)
	}
	bundle := filepath.Join(run.public, "ca-bundle.pem")
	data, err := trustBundle(caPEM)
	if err != nil {
		return "", err
	}
	if err := writeNew(bundle, data, 0o444); err != nil {
		return "", fmt.Errorf("writing the trust bundle: %w", err)
	}
	return bundle, nil
}

// writeNew creates path (which must not exist, and is not followed if it
// is a link) with data and mode.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// trustBundle is the system's root bundle (the first of systemBundles, or
// the one SSL_CERT_FILE names for BotBox) followed by caPEM; without a
// system bundle, mitm.TrustBundle's embedded Mozilla roots.
func trustBundle(caPEM []byte) ([]byte, error) {
	candidates := systemBundles
	if p := os.Getenv("SSL_CERT_FILE"); p != "" {
		candidates = append([]string{p}, candidates...)
	}
	for _, p := range candidates {
		sys, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(sys, []byte("-----BEGIN CERTIFICATE-----")) {
			continue
		}
		out := append(bytes.TrimRight(sys, "\n"), '\n')
		return append(out, append(bytes.TrimSpace(caPEM), '\n')...), nil
	}
	return mitm.TrustBundle(caPEM)
}

// hiddenPaths are what the command must not see: secrets_dir, the CA key,
// the config file, every run's private directory (privateBase), the
// session bus and the user's service manager (sessionBusPaths), the
// placeholders directory the config names and the log file (the command
// could forge decision lines that `botbox suggest` turns into policy). Each is made
// absolute and symlink-free, so the mount covers what BotBox reads.
func hiddenPaths(cfg *config.Config, o Options, run *runDir) ([]string, error) {
	paths := []string{cfg.SecretsDir, cfg.Interception.CAKeyPath, o.ConfigPath, run.privateBase}
	if o.LogPath != "" {
		paths = append(paths, o.LogPath)
	}
	if o.Getenv != nil {
		paths = append(paths, sessionBusPaths(o.Getenv)...)
	}
	return resolveHidden(paths)
}

// checkHidden refuses covers that would take the command's world away: one
// over / (everything), or over the working directory or a directory above
// it (the command would start in a directory that is gone).
func checkHidden(hide []string, wd string) error {
	for _, h := range hide {
		if h == "/" {
			return errors.New("local mode covers secrets_dir, the CA key, the config and the log file in the command's view, and one of them is /: give them a directory of their own")
		}
		if rel, err := filepath.Rel(h, wd); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return fmt.Errorf("the working directory %s is inside %s, which the command must not see (secrets_dir, the CA key, the config or the log file): run botbox exec from elsewhere", wd, h)
		}
	}
	return nil
}

// sessionBusPaths are the sockets through which a process of the user has
// the user's service manager start a process outside every namespace of
// botbox exec, with the machine's network (`systemd-run --user CMD`):
// the session bus ($XDG_RUNTIME_DIR/bus and each unix:path= of
// DBUS_SESSION_BUS_ADDRESS) and systemd's own directory of the user
// manager ($XDG_RUNTIME_DIR/systemd, its private socket). Abstract
// addresses (unix:abstract=) belong to the network namespace and are out
// of reach already.
func sessionBusPaths(getenv func(string) string) []string {
	var out []string
	if dir := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(dir) {
		out = append(out, filepath.Join(dir, "bus"), filepath.Join(dir, "systemd"))
	}
	for addr := range strings.SplitSeq(getenv("DBUS_SESSION_BUS_ADDRESS"), ";") {
		kvs, ok := strings.CutPrefix(addr, "unix:")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(kvs, ",") {
			if v, ok := strings.CutPrefix(kv, "path="); ok {
				if p, err := url.PathUnescape(v); err == nil && filepath.IsAbs(p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// resolveHidden makes each path absolute and symlink-free (resolvedPath)
// and drops duplicates.
func resolveHidden(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		abs, err := resolvedPath(p)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	return out, nil
}

// resolvedPath is p absolute and symlink-free; a path that does not exist
// is only made absolute.
func resolvedPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("resolving %s to hide it from the command: %w", p, err)
	}
	return abs, nil
}

// commandEnv is the caller's environment with the trust variables set to
// bundle and each current placeholder's variable set to it.
func commandEnv(environ []string, bundle string, placeholders []placeholder.Entry) []string {
	set := map[string]string{}
	for _, k := range TrustVariables {
		set[k] = bundle
	}
	for _, e := range placeholders {
		if e.Current {
			set[secretref.EnvName(e.Ref)] = e.Placeholder
		}
	}
	out := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range set {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, k+"="+set[k])
	}
	return out
}
