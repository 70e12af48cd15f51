package localmode

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwarded are the signals passed on to the command: those a user or a
// supervisor sends to stop or poke a program. SIGKILL and SIGSTOP cannot
// be caught; the terminal's own signals (SIGINT, SIGQUIT, SIGTSTP,
// SIGWINCH from the keyboard or a resize) reach the command directly,
// because its process group is the terminal's foreground one.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// HelperMain is the helper inside the namespaces (see the package comment).
// It returns the process exit status; the command's own status travels
// back to the parent in an "exit" reply.
func HelperMain() int {
	// The command is forked from this thread, which alone gives up the
	// capabilities before the fork (dropPrivileges): it must stay the
	// main goroutine's for good.
	runtime.LockOSThread()
	// Not dumpable: the command (same UID) can neither ptrace this process
	// nor read its memory through /proc.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	unix.CloseOnExec(helperFD)
	if err := closeInherited(); err != nil {
		fmt.Fprintf(os.Stderr, "botbox exec helper: %v\n", err)
		return 1
	}
	ch, err := newChannel(os.NewFile(helperFD, "botbox-exec-parent"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "botbox exec helper: %v\n", err)
		return 1
	}
	fail := func(code int, format string, a ...any) int {
		_ = ch.send(reply{Kind: "error", Code: code, Error: fmt.Sprintf(format, a...)}, -1)
		return 1
	}
	var s setup
	if _, err := ch.recv(&s); err != nil {
		return fail(1, "reading the setup: %v", err)
	}
	// Its own process group: a signal sent to BotBox's job (kill -TERM
	// -PGID) reaches BotBox, which forwards it once; the helper would
	// otherwise forward it a second time.
	_ = unix.Setpgid(0, 0)
	if err := prepareNetwork(s); err != nil {
		return fail(1, "%v", err)
	}
	if err := prepareMounts(s.Hide); err != nil {
		return fail(1, "%v", err)
	}
	var fds, errnos []int
	for _, sp := range s.Listen {
		f, err := listenFile(sp.Network, sp.Addr)
		var errno unix.Errno
		switch {
		case err == nil:
			defer f.Close()
			fds = append(fds, int(f.Fd()))
			errnos = append(errnos, 0)
		case errors.As(err, &errno) && (errno == unix.EADDRNOTAVAIL || errno == unix.EAFNOSUPPORT):
			// No IPv6 on this kernel: the server skips [::1] on these.
			errnos = append(errnos, int(errno))
		default:
			return fail(1, "listen %s %s in the command's network namespace: %v", sp.Network, sp.Addr, err)
		}
	}
	if err := ch.sendFDs(reply{Kind: "ready", Errnos: errnos}, fds); err != nil {
		return 1
	}
	var start request
	for {
		var req request
		if _, err := ch.recv(&req); err != nil {
			return 1 // the parent is gone: nothing was started
		}
		if req.Op == "start" {
			start = req
			break
		}
		if req.Op != "listen" {
			return fail(1, "unexpected request %q before start", req.Op)
		}
		f, err := listenFile(req.Network, req.Addr)
		if err != nil {
			var errno unix.Errno
			_ = errors.As(err, &errno)
			_ = ch.send(reply{Kind: "socket", Error: err.Error(), Errno: int(errno)}, -1)
			continue
		}
		err = ch.send(reply{Kind: "socket"}, int(f.Fd()))
		_ = f.Close()
		if err != nil {
			return 1
		}
	}

	if len(start.Argv) == 0 {
		return fail(1, "no command")
	}
	tty := s.TTY
	path, err := lookPath(start.Argv[0], start.Env)
	if err != nil {
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		return fail(code, "%v", err)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	if err := dropPrivileges(); err != nil {
		return fail(1, "dropping privileges: %v", err)
	}
	if err := installCommandFilter(); err != nil {
		return fail(1, "%v", err)
	}
	attr := &syscall.ProcAttr{
		Dir:   s.Dir,
		Env:   start.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Foreground: tty >= 0, Ctty: max(tty, 0)},
	}
	pid, err := syscall.ForkExec(path, start.Argv, attr)
	if err != nil {
		return fail(126, "starting %s: %v", start.Argv[0], err)
	}
	_ = ch.send(reply{Kind: "started", Pid: pid}, -1)

	go func() {
		for sig := range sigs {
			_ = unix.Kill(pid, sig.(syscall.Signal))
		}
	}()
	go func() {
		for {
			var req request
			if _, err := ch.recv(&req); err != nil {
				// The parent is gone (even SIGKILLed): nothing may run
				// unconfined by its listeners' owner; end everything.
				_ = unix.Kill(-1, unix.SIGKILL)
				os.Exit(1)
			}
			switch req.Op {
			case "signal":
				_ = unix.Kill(pid, syscall.Signal(req.Signal))
			case "continue":
				if tty >= 0 && req.Foreground {
					_ = setForeground(tty, pid)
				}
				_ = unix.Kill(-pid, unix.SIGCONT)
			}
		}
	}()
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, unix.WUNTRACED, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fail(1, "waiting for the command: %v", err)
		}
		if wpid != pid {
			continue // an orphan reparented to PID 1: reaped
		}
		switch {
		case ws.Stopped():
			_ = ch.send(reply{Kind: "stopped", Signal: int(ws.StopSignal())}, -1)
			continue
		case ws.Exited():
			_ = ch.send(reply{Kind: "exit", Code: ws.ExitStatus()}, -1)
		case ws.Signaled():
			_ = ch.send(reply{Kind: "exit", Signal: int(ws.Signal())}, -1)
		default:
			continue
		}
		// Whatever the command left running in the background ends with
		// it: PID 1's exit would kill it anyway, this is explicit.
		_ = unix.Kill(-1, unix.SIGKILL)
		return 0
	}
}

// closeInherited marks every descriptor above stderr close-on-exec: what
// BotBox inherited from its own parent (a socket of a service manager, a
// connection the shell held open) would otherwise reach the command and be
// a way out of its network namespace. Go opens its own descriptors
// close-on-exec; os/exec and BotBox pass on whatever came without.
func closeInherited() error {
	const closeRangeCloexec = 1 << 2 // CLOSE_RANGE_CLOEXEC, Linux 5.11
	if err := unix.CloseRange(3, ^uint(0), closeRangeCloexec); err == nil {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("listing inherited descriptors: %w", err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// listenFile creates a listening TCP or bound UDP socket in this network
// namespace and returns its descriptor.
func listenFile(network, addr string) (*os.File, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
		ln, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		return ln.(*net.TCPListener).File()
	case "udp", "udp4", "udp6":
		pc, err := net.ListenPacket(network, addr)
		if err != nil {
			return nil, err
		}
		defer pc.Close()
		return pc.(*net.UDPConn).File()
	}
	return nil, fmt.Errorf("network %q is not served", network)
}

// ForegroundTTY returns the first of stdin, stdout and stderr that is this
// session's controlling terminal while this process's group is its
// foreground one, or -1: a botbox exec started in the background never
// takes the terminal.
func ForegroundTTY() int {
	for fd := 0; fd <= 2; fd++ {
		if pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
			if pg == unix.Getpgrp() {
				return fd
			}
			return -1
		}
	}
	return -1
}

// TakeTerminal makes the caller's process group the terminal's foreground
// one again (after the command stopped or ended).
func TakeTerminal(tty int) error { return setForeground(tty, unix.Getpgrp()) }

// setForeground makes pgrp the terminal's foreground process group. The
// caller is in the background, so SIGTTOU is blocked on this thread for the
// call (a blocked SIGTTOU lets tcsetpgrp proceed).
func setForeground(tty, pgrp int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	set.Val[(unix.SIGTTOU-1)/64] |= 1 << ((uint(unix.SIGTTOU) - 1) % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return err
	}
	defer func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }()
	return unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, pgrp)
}

// dropPrivileges makes what this thread forks and executes capability-free
// for good: the bounding set emptied (an execve as UID 0 gains nothing),
// the inheritable and ambient sets cleared (the ambient capabilities the
// helper was started with must not pass on), and no_new_privs set (setuid
// and file-capability binaries grant nothing). The helper keeps its own
// effective capabilities; it needs none after this.
func dropPrivileges() error {
	for c := 0; c < 64; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	return nil
}

// lookPath finds argv0 on the PATH of env, as a shell would.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		if err := executable(argv0); err != nil {
			return "", fmt.Errorf("%s: %w", argv0, err)
		}
		return argv0, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := false
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, argv0)
		switch err := executable(p); {
		case err == nil:
			return p, nil
		case errors.Is(err, os.ErrPermission):
			denied = true
		}
	}
	if denied {
		return "", fmt.Errorf("%s: %w", argv0, os.ErrPermission)
	}
	return "", fmt.Errorf("%s: command not found", argv0)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("is a directory: %w", os.ErrPermission)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return os.ErrPermission
	}
	return nil
}
