package localmode

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spec is one confined command.
type Spec struct {
	// Dir is its working directory ("" = the caller's).
	Dir string
	// Hide are absolute, symlink-free paths covered by empty read-only
	// mounts in the command's mount namespace.
	Hide []string
	// Redirects maps TCP destination ports (80, 443, --tcp-ports) to
	// BotBox's listener ports in the namespace.
	Redirects map[uint16]uint16
	// DNSPort is the DNS guard's port: UDP and TCP 53 to any address go to
	// it (0: DNS is dropped like any other port).
	DNSPort uint16
	// Listen are sockets ("tcp" or "udp", and an address) made during the
	// setup, handed over together; Listen and ListenPacket serve them
	// first, and ask the helper for any other.
	Listen []SocketSpec
	// Stdin, Stdout and Stderr are the command's (and the helper's).
	Stdin, Stdout, Stderr *os.File
	// TTY is which of 0, 1, 2 is the controlling terminal of which BotBox
	// holds the foreground (-1: none): the command's process group then
	// becomes the foreground one.
	TTY int
}

// Sandbox is a started helper: the namespaces exist; once Prepare's setup
// is done the rules are in and the secrets covered, and Listen and
// ListenPacket create sockets in the namespace until Begin starts the
// command.
type Sandbox struct {
	cmd *exec.Cmd
	ch  *channel
	mu  sync.Mutex // one request at a time before Begin
	// readyDone and readyErr: the helper's answer to Prepare (mu).
	readyDone bool
	readyErr  error
	// premade are the sockets of Spec.Listen not yet taken (mu).
	premade    map[SocketSpec]*os.File
	premadeErr map[SocketSpec]error // why a socket of Spec.Listen was not made (no IPv6)
	begun      bool                 // Begin sent "start" (mu)
	listen     []SocketSpec
	replies    chan reply // after Begin: the helper's "stopped" and "exit"
	done       chan struct{}
	procErr    error
	tty        int
}

func countZero(v []int) int {
	n := 0
	for _, x := range v {
		if x == 0 {
			n++
		}
	}
	return n
}

// SocketSpec is one socket made in the command's network namespace:
// Network "tcp" (listening) or "udp" (bound), and an address as the server
// spells it ("127.0.0.1:8080", "[::1]:8080").
type SocketSpec struct {
	Network string
	Addr    string
}

// ExitStatus is how the command ended: Code, or Signal when a signal
// ended it.
type ExitStatus struct {
	Code   int
	Signal syscall.Signal
}

// StartError is a failure before the command ran; Code is the exit
// status to end with (127: command not found, 126: not executable, 1:
// anything else).
type StartError struct {
	Code int
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Start is Spawn and Prepare: the namespaces exist and the helper is
// preparing them when it returns (Listen, ListenPacket and Begin wait for
// the end of that).
func Start(spec Spec) (*Sandbox, error) {
	sb, err := Spawn(spec.Stdin, spec.Stdout, spec.Stderr)
	if err != nil {
		return nil, err
	}
	if err := sb.Prepare(spec); err != nil {
		sb.Kill()
		return nil, err
	}
	return sb, nil
}

// Spawn creates the namespaces and starts the helper in them with the
// command's stdio; the helper then waits for Prepare. Spawning first lets
// the helper start (a Go binary's start-up) while the caller loads its
// configuration. It leaves the calling process not dumpable
// (PR_SET_DUMPABLE 0).
func Spawn(stdin, stdout, stderr *os.File) (*Sandbox, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the botbox binary to run the namespace helper: %w", err)
	}
	parent, child, err := socketPair()
	if err != nil {
		return nil, err
	}
	defer child.Close()
	uid, gid := os.Getuid(), os.Getgid()
	cmd := &exec.Cmd{
		Path:       self,
		Args:       []string{"botbox", HelperCommand},
		Env:        []string{},
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{child},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWPID | unix.CLONE_NEWIPC,
			// The invoking user, as itself: inside, the command sees its own
			// UID and GID; nothing else is mapped.
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
			GidMappingsEnableSetgroups: false,
			// What the helper does as the namespaces' owner (rules, routes,
			// mounts, capability drop, low ports); a non-root UID keeps them
			// across its execve only as ambient capabilities. The command
			// gets none of them (dropPrivileges).
			AmbientCaps: []uintptr{unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_NET_BIND_SERVICE},
			// If BotBox dies, the helper (PID 1 of the namespace) dies, and
			// with it every process of the namespace.
			Pdeathsig: unix.SIGKILL,
		},
	}
	// The parent writes the child's uid_map and gid_map, which /proc makes
	// root's while the child, like its parent, is not dumpable; the flag is
	// back before any secret is loaded (Run loads them after Spawn).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	err = cmd.Start()
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		_ = parent.Close()
		return nil, diagnoseUserNS(err)
	}
	ch, err := newChannel(parent)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	sb := &Sandbox{cmd: cmd, ch: ch, replies: make(chan reply, 8), done: make(chan struct{})}
	go func() { sb.procErr = cmd.Wait(); close(sb.done) }()
	return sb, nil
}

// Prepare sends the helper what to prepare: the rules, the routes, the
// covers, /proc. It does not wait; the first Listen, ListenPacket or Begin
// does, and fails with the helper's error.
func (sb *Sandbox) Prepare(spec Spec) error {
	sb.tty = spec.TTY
	sb.listen = spec.Listen
	s := setup{Dir: spec.Dir, Hide: spec.Hide, DNSPort: spec.DNSPort, TTY: spec.TTY}
	for _, l := range spec.Listen {
		s.Listen = append(s.Listen, socketSpec(l))
	}
	for from, to := range spec.Redirects {
		s.Redirects = append(s.Redirects, redirect{From: from, To: to})
	}
	if err := sb.ch.send(s, -1); err != nil {
		return fmt.Errorf("sending the setup to the namespace helper: %w", err)
	}
	return nil
}

// awaitReady waits, once, for the helper's "ready"; sb.mu is held.
func (sb *Sandbox) awaitReady() error {
	if sb.readyDone {
		return sb.readyErr
	}
	sb.readyDone = true
	var r reply
	files, err := sb.ch.recvFDs(&r)
	switch {
	case err != nil:
		sb.readyErr = diagnoseUserNS(fmt.Errorf("the namespace helper ended during setup: %w", err))
	case r.Kind != "ready":
		sb.readyErr = diagnoseUserNS(fmt.Errorf("preparing the command's namespaces: %s", r.Error))
	case len(r.Errnos) != len(sb.listen) || len(files) != countZero(r.Errnos):
		sb.readyErr = fmt.Errorf("the namespace helper made %d sockets, want %d", len(files), len(sb.listen))
	default:
		sb.premade = map[SocketSpec]*os.File{}
		sb.premadeErr = map[SocketSpec]error{}
		next := 0
		for i, errno := range r.Errnos {
			if errno != 0 {
				sb.premadeErr[sb.listen[i]] = fmt.Errorf("listen %s %s in the command's network namespace: %w", sb.listen[i].Network, sb.listen[i].Addr, syscall.Errno(errno))
				continue
			}
			sb.premade[sb.listen[i]] = files[next]
			next++
		}
		return nil
	}
	for _, f := range files {
		_ = f.Close()
	}
	return sb.readyErr
}

// socket asks the helper for one socket.
func (sb *Sandbox) socket(network, addr string) (*os.File, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if err := sb.awaitReady(); err != nil {
		return nil, err
	}
	if f, ok := sb.premade[SocketSpec{network, addr}]; ok {
		delete(sb.premade, SocketSpec{network, addr})
		return f, nil
	}
	if err, ok := sb.premadeErr[SocketSpec{network, addr}]; ok {
		return nil, err
	}
	if sb.begun {
		// The helper serves requests only before the command starts (and
		// the channel is the reply reader's now).
		return nil, fmt.Errorf("listen %s %s: not made during the setup, and the command has started", network, addr)
	}
	if err := sb.ch.send(request{Op: "listen", Network: network, Addr: addr}, -1); err != nil {
		return nil, fmt.Errorf("asking the namespace helper for %s %s: %w", network, addr, err)
	}
	var r reply
	f, err := sb.ch.recv(&r)
	if err != nil {
		return nil, fmt.Errorf("asking the namespace helper for %s %s: %w", network, addr, err)
	}
	if r.Kind != "socket" || r.Error != "" || f == nil {
		if f != nil {
			_ = f.Close()
		}
		if r.Errno != 0 {
			return nil, fmt.Errorf("listen %s %s in the command's network namespace: %w", network, addr, syscall.Errno(r.Errno))
		}
		return nil, fmt.Errorf("listen %s %s in the command's network namespace: %s", network, addr, r.Error)
	}
	return f, nil
}

// Listen is a server.ListenFunc: a TCP listener created in the command's
// network namespace, served from BotBox's.
func (sb *Sandbox) Listen(network, addr string) (net.Listener, error) {
	f, err := sb.socket(network, addr)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FileListener(f)
}

// ListenPacket binds a UDP socket in the command's network namespace.
func (sb *Sandbox) ListenPacket(network, addr string) (net.PacketConn, error) {
	f, err := sb.socket(network, addr)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return net.FilePacketConn(f)
}

// Begin starts argv (argv[0] looked up on the PATH of env) with the whole
// environment env. After it, Signal forwards signals and Replies reports
// stops and the exit.
func (sb *Sandbox) Begin(argv, env []string) error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if err := sb.awaitReady(); err != nil {
		return err
	}
	sb.begun = true
	if err := sb.ch.send(request{Op: "start", Argv: argv, Env: env}, -1); err != nil {
		return fmt.Errorf("starting the command: %w", err)
	}
	var r reply
	if _, err := sb.ch.recv(&r); err != nil {
		return fmt.Errorf("starting the command: the namespace helper ended: %w", err)
	}
	switch r.Kind {
	case "started":
	case "error":
		code := r.Code
		if code == 0 {
			code = 1
		}
		return &StartError{Code: code, Err: errors.New(r.Error)}
	default:
		return fmt.Errorf("starting the command: unexpected reply %q", r.Kind)
	}
	go func() {
		defer close(sb.replies)
		for {
			var r reply
			if _, err := sb.ch.recv(&r); err != nil {
				return
			}
			sb.replies <- r
		}
	}()
	return nil
}

// CloseUnused closes the sockets of Spec.Listen that no Listen or
// ListenPacket took (made for a bind the server did not do); call it once
// the server has bound. Later Listen calls for them ask the helper, which
// no longer answers once the command runs.
func (sb *Sandbox) CloseUnused() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for k, f := range sb.premade {
		_ = f.Close()
		delete(sb.premade, k)
	}
}

// Signal forwards sig to the command.
func (sb *Sandbox) Signal(sig syscall.Signal) {
	_ = sb.ch.send(request{Op: "signal", Signal: int(sig)}, -1)
}

// Continue resumes a stopped command; with foreground, its process group
// gets the terminal back first.
func (sb *Sandbox) Continue(foreground bool) {
	_ = sb.ch.send(request{Op: "continue", Foreground: foreground}, -1)
}

// Replies are the helper's reports after Begin: "stopped" when the command
// was stopped, "exit" when it ended. The channel closes when the helper
// is gone.
func (sb *Sandbox) Replies() <-chan reply { return sb.replies }

// Done is closed when the helper process has been reaped.
func (sb *Sandbox) Done() <-chan struct{} { return sb.done }

// Exited reports whether the helper has exited (the command's "exit" may
// not have been read yet).
func (sb *Sandbox) Exited() bool {
	select {
	case <-sb.done:
		return true
	default:
		return false
	}
}

// Kill ends the helper and with it every process of the namespace, and
// waits for it.
func (sb *Sandbox) Kill() {
	_ = sb.cmd.Process.Kill()
	<-sb.done
	_ = sb.ch.c.Close()
}

// Close waits for the helper to end (it does once the command has) and
// releases the socket pair.
func (sb *Sandbox) Close() {
	<-sb.done
	_ = sb.ch.c.Close()
}
