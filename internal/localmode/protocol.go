package localmode

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// HelperCommand is the argument with which the botbox binary re-executes
// itself as the helper inside the namespaces (cmd/botbox dispatches it to
// HelperMain before any other command). It is not meant to be typed.
const HelperCommand = "__exec-helper"

// helperFD is the helper's end of the socket pair (its first ExtraFiles).
const helperFD = 3

// maxMessage bounds one message on the socket pair (the setup message
// carries the command's argv and environment).
const maxMessage = 4 << 20

// setup is the parent's first message: everything the helper prepares
// before the command starts.
type setup struct {
	Dir string `json:"dir"`
	// Hide are absolute paths covered by an empty read-only mount: a
	// tmpfs over a directory, an empty file over a file.
	Hide []string `json:"hide"`
	// Redirects are TCP destination port → listener port.
	Redirects []redirect `json:"redirects"`
	// DNSPort is the DNS guard's port (UDP and TCP 53 are redirected to it).
	DNSPort uint16 `json:"dns_port"`
	// Listen are the sockets made during setup and passed with "ready",
	// in this order: the listeners the server will bind, in one message
	// instead of one round trip each.
	Listen []socketSpec `json:"listen,omitempty"`
	// TTY is the descriptor (0-2) of the terminal whose foreground process
	// group the command's becomes, -1 for none.
	TTY int `json:"tty"`
}

// socketSpec is one socket: network "tcp" or "udp" and its address.
type socketSpec struct {
	Network string `json:"network"`
	Addr    string `json:"addr"`
}

type redirect struct {
	From uint16 `json:"from"`
	To   uint16 `json:"to"`
}

// request is a later message of the parent.
type request struct {
	// Op is "listen" (Network, Addr), "start" (Argv, Env), "signal" (Signal) or
	// "continue" (the terminal's job control: the parent is in the
	// foreground again).
	Op      string `json:"op"`
	Network string `json:"network,omitempty"`
	Addr    string `json:"addr,omitempty"`
	Signal  int    `json:"signal,omitempty"`
	// Argv and Env, for "start": the command and its whole environment.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	// Foreground, for "continue": give the terminal back to the command.
	Foreground bool `json:"foreground,omitempty"`
}

// reply is a message of the helper. Kind is "ready" (setup done), "socket"
// (one file descriptor attached, or Error), "started" (Pid, in the helper's
// PID namespace), "stopped" (the command was stopped by Signal) or "exit"
// (Code, or Signal when a signal ended it). "error" ends the run (Error).
type reply struct {
	Kind  string `json:"kind"`
	Error string `json:"error,omitempty"`
	// Errno is the error number behind Error, when there is one (a
	// "socket" reply), so that the server can tell "no IPv6" from a
	// failure.
	Errno int `json:"errno,omitempty"`
	// Errnos, in "ready", is one entry per setup.Listen: 0 when the socket
	// was made (its descriptor is attached, in order), else why not.
	Errnos []int `json:"errnos,omitempty"`
	Pid    int   `json:"pid,omitempty"`
	Code   int   `json:"code,omitempty"`
	Signal int   `json:"signal,omitempty"`
}

// channel is one end of the SOCK_SEQPACKET pair: one JSON value per
// message, with at most one file descriptor attached. recv is called by
// one goroutine at a time (its buffer is reused).
type channel struct {
	c   *net.UnixConn
	buf []byte
}

func newChannel(f *os.File) (*channel, error) {
	defer f.Close()
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		_ = fc.Close()
		return nil, errors.New("socket pair: not a Unix socket")
	}
	return &channel{c: uc}, nil
}

// maxFDs bounds the descriptors one message carries (the ready reply
// carries every pre-made listener: a dozen at most).
const maxFDs = 32

func (ch *channel) send(v any, fd int) error {
	if fd < 0 {
		return ch.sendFDs(v, nil)
	}
	return ch.sendFDs(v, []int{fd})
}

func (ch *channel) sendFDs(v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(fds) > maxFDs {
		return fmt.Errorf("socket pair: %d descriptors in one message, at most %d", len(fds), maxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = ch.c.WriteMsgUnix(b, oob, nil)
	return err
}

// recv reads one message into v and returns the descriptor attached to it
// (nil: none). Any descriptor beyond the first is closed.
func (ch *channel) recv(v any) (*os.File, error) {
	files, err := ch.recvFDs(v)
	if err != nil || len(files) == 0 {
		return nil, err
	}
	for _, f := range files[1:] {
		_ = f.Close()
	}
	return files[0], nil
}

// recvFDs reads one message into v and returns the descriptors attached to
// it, in order.
func (ch *channel) recvFDs(v any) ([]*os.File, error) {
	if ch.buf == nil {
		ch.buf = make([]byte, maxMessage)
	}
	buf := ch.buf
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, _, err := ch.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, errEOF
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("socket pair: %w", err)
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "received"))
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll()
		return nil, errors.New("socket pair: message truncated")
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll()
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	return files, nil
}

var errEOF = errors.New("socket pair closed")

// socketPair returns the parent's and the helper's ends.
func socketPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "botbox-exec-parent"), os.NewFile(uintptr(fds[1]), "botbox-exec-helper"), nil
}
