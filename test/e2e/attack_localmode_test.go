package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Attacks on local mode (`botbox exec`, issue 22) from the confined
// command, a hostile agent running as the same user (attack playbook §13):
// each test fails when the way out, or into BotBox, exists. The ways that
// held stay as regression tests.

// attackProbeScript is run by python3 inside botbox exec (or outside, as a
// control) and prints one JSON object: for each probe "ok" or the errno
// name it failed with. argv[1] is the name of an abstract Unix socket to
// connect to.
const attackProbeScript = `
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return r, ctypes.get_errno()
def name(e):
    return errno.errorcode.get(e, str(e))
def res(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return name(e.errno)
def sock(*a):
    return lambda: socket.socket(*a).close()
def abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect("\0" + sys.argv[1])
out = {}
out["abstract"] = res(abstract)
out["vsock_stream"] = res(sock(40, socket.SOCK_STREAM))  # AF_VSOCK
out["vsock_seqpacket"] = res(sock(40, socket.SOCK_SEQPACKET))
out["packet"] = res(sock(socket.AF_PACKET, socket.SOCK_RAW, 0x0300))
out["raw"] = res(sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
out["raw6"] = res(sock(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))
params = ctypes.create_string_buffer(120)
r, e = sc(425, 4, params)  # io_uring_setup: its IORING_OP_SOCKET makes sockets seccomp never sees
out["io_uring"] = "ok" if r >= 0 else name(e)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
remote = iovec(0x400000, 8)
r, e = sc(310, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)  # process_vm_readv of PID 1
out["process_vm_readv"] = "ok" if r >= 0 else name(e)
pidfd, e = sc(434, 1, 0)  # pidfd_open(1)
if pidfd < 0:
    out["pidfd_getfd"] = "pidfd_open:" + name(e)
else:
    got = "EBADF"
    for fd in range(3, 32):  # the helper's socket pair, its listeners
        r, e = sc(438, pidfd, fd, 0)  # pidfd_getfd
        if r >= 0:
            got = "ok"
            break
        if e != errno.EBADF:
            got = name(e)
            break
    out["pidfd_getfd"] = got
for n in ["fd", "root", "cwd", "map_files"]:
    out["proc1_" + n] = res(lambda: os.listdir("/proc/1/" + n))
for n in ["maps", "environ", "mem", "auxv", "syscall", "stack"]:
    out["proc1_" + n] = res(lambda: open("/proc/1/" + n, "rb").read(1))
import fcntl, pty, termios
master, slave = pty.openpty()  # a terminal of its own: TIOCSTI on it is legal without the filter
out["tiocsti_own_pty"] = res(lambda: fcntl.ioctl(slave, termios.TIOCSTI, b"x"))
print(json.dumps(out))
`

// runAttackProbes runs attackProbeScript inside botbox exec as the local
// user and returns its answers.
func (l *local) runAttackProbes(t *testing.T, abstractName string) map[string]string {
	t.Helper()
	script := filepath.Join(l.p.dir, "attack-probes.py")
	writeFile(t, script, []byte(attackProbeScript), 0o644)
	r := l.mustExec(t, nil, []string{"--quiet"}, "python3", script, abstractName)
	var got map[string]string
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &got); err != nil {
		t.Fatalf("the probes printed %q: %v\nstderr:\n%s", r.stdout, err, r.stderr)
	}
	return got
}

// TestAttackLocalModeSocketsAndHelper (§13, §10 of the playbook): from
// inside, the machine's abstract Unix sockets (a stand-in for the session
// D-Bus's or an X server's @-socket, listening in the machine's network
// namespace as the same user) are not reachable; raw and packet sockets
// are refused (no CAP_NET_RAW); the helper (PID 1, holding the socket
// pair and the listeners) gives nothing: process_vm_readv, pidfd_getfd
// of its descriptors and its /proc entries fail; TIOCSTI is refused on
// any terminal, a pseudo-terminal the command opened itself included. A
// user namespace the command makes itself gives it no power over its
// network namespace: the routes and the rules stay, and a direct
// connection still fails.
func TestAttackLocalModeSocketsAndHelper(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	abstract := "botbox-attack-" + randomHex(t, 6)
	srv := startProc(t, "abstract-listener", l.p.dir, nil, l.userArgv(nil, "python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + sys.argv[1]); s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept(); print("connected", flush=True); c.close()
`, abstract)...)
	if !waitFor(startupTimeout, func() bool { return strings.Contains(srv.logs(), "ready") }) {
		t.Fatalf("abstract listener did not start: %s", srv.logs())
	}
	// Control: the same user outside reaches it (else "refused" below
	// proves nothing).
	ctl := runArgv(t, l.userArgv(nil, "python3", "-c", `import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect("\0" + sys.argv[1]); print("ok")`, abstract))
	if strings.TrimSpace(ctl.stdout) != "ok" {
		t.Fatalf("control: the user outside cannot reach the abstract socket: %s %s", ctl.stdout, ctl.stderr)
	}
	got := l.runAttackProbes(t, abstract)
	t.Logf("probes: %v", got)
	if got["abstract"] == "ok" || strings.Count(srv.logs(), "connected") != 1 {
		t.Errorf("the command reached the machine's abstract socket @%s (%s):\n%s", abstract, got["abstract"], srv.logs())
	}
	for _, k := range []string{"packet", "raw", "raw6", "process_vm_readv", "pidfd_getfd", "tiocsti_own_pty"} {
		if got[k] != "EPERM" {
			t.Errorf("%s: %q, want EPERM", k, got[k])
		}
	}
	for k, v := range got {
		if strings.HasPrefix(k, "proc1_") && v == "ok" {
			t.Errorf("/proc/1/%s (the helper) is readable by the command", strings.TrimPrefix(k, "proc1_"))
		}
	}

	p := l.p
	mark := p.mark(t)
	r := l.mustExec(t, nil, []string{"--quiet"}, "sh", "-c", `
unshare -Ur ip route del default 2>/dev/null && echo ROUTE-DELETED
unshare -Ur ip -6 route del default 2>/dev/null && echo ROUTE6-DELETED
unshare -Ur nft flush ruleset 2>/dev/null && echo RULES-FLUSHED
unshare -Ur ip link set lo down 2>/dev/null && echo LO-DOWN
unshare -Ur ip link add botbox-d0 type dummy 2>/dev/null && echo LINK-ADDED
unshare -Urn sh -c 'ip link set lo up && echo OWN-NETNS'
`+p.bins.client+` tcp -addr `+p.addr4(8443).String()+` -connect-timeout 1s
true`)
	for _, bad := range []string{"ROUTE-DELETED", "ROUTE6-DELETED", "RULES-FLUSHED", "LO-DOWN", "LINK-ADDED"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("a user namespace of the command's own changed its network namespace (%s):\n%s", bad, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "OWN-NETNS") {
		t.Errorf("control: the command could not make a network namespace of its own (the refusals above prove nothing):\n%s\n%s", r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, `"connected":true`) {
		t.Errorf("direct TCP connected after the attempts:\n%s", r.stdout)
	}
	p.assertNoTCP(t, mark, p.addr4(8443))
	l.assertNoLeftovers(t)
}

// TestAttackLocalModeUnconfinedSockets (§13, "a packet out that did not
// pass BotBox"): AF_VSOCK is not confined by the network namespace: on a
// VM (this CI machine is one: /dev/vsock) a vsock socket reaches the
// hypervisor's services (CID 2) and every vsock listener of the machine
// from any namespace. io_uring's IORING_OP_SOCKET makes sockets without the
// socket system call, so a filter on socket alone would not hold. Both are
// refused inside botbox exec. The connect itself is not tried: the only
// vsock peer here is the VM's host, outside what a test may reach; the
// socket's creation is the hole (outside, the same user creates one).
func TestAttackLocalModeUnconfinedSockets(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	ctl := runArgv(t, l.userArgv(nil, "python3", "-c", `
import socket
try:
    socket.socket(40, socket.SOCK_STREAM).close(); print("ok")
except OSError as e:
    print(e.errno)`))
	t.Logf("control: socket(AF_VSOCK) outside botbox exec: %s", strings.TrimSpace(ctl.stdout))
	got := l.runAttackProbes(t, "botbox-attack-none")
	for _, k := range []string{"vsock_stream", "vsock_seqpacket", "io_uring"} {
		if got[k] != "EPERM" {
			t.Errorf("%s inside botbox exec: %q, want EPERM (the command filter)", k, got[k])
		}
	}
}

// TestAttackLocalModeOtherRunsPrivate (§13: the secrets, the CA key): two
// agents of the same user run side by side. Each run hides its own private
// directory (its CA key, the placeholders' key) from its command, but the
// other run's lies in the same $XDG_RUNTIME_DIR, readable by the same
// user: the command of run B must see no key of run A, neither of a run
// started before it nor of one started while it runs.
func TestAttackLocalModeOtherRunsPrivate(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}, placeholders: true})
	before := l.startExec(t, "botbox-exec-run-before", "sh", "-c", "echo ready; exec sleep 30")
	// B waits until three runs exist (before, itself, after), then reads
	// every file it finds that holds a private key or is named like one.
	thief := l.startExec(t, "botbox-exec-thief", "sh", "-c", `echo ready
i=0; while [ "$(ls -d "$XDG_RUNTIME_DIR"/botbox-exec-[0-9]* 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
echo runs $(ls -d "$XDG_RUNTIME_DIR"/botbox-exec-[0-9]* | wc -l)
find "$XDG_RUNTIME_DIR" -type f 2>/dev/null | while read -r f; do
  case "$f" in *.key) cat "$f" >/dev/null 2>&1 && echo "READ $f";; esac
  grep -q 'PRIVATE KEY' "$f" 2>/dev/null && echo "READ $f"
done
echo done`)
	after := l.startExec(t, "botbox-exec-run-after", "sh", "-c", "echo ready; exec sleep 30")
	select {
	case <-thief.done:
	case <-time.After(commandTimeout):
		t.Fatalf("the thief run did not end:\n%s", thief.logs())
	}
	out, _ := os.ReadFile(thief.stdoutPath)
	if !strings.Contains(string(out), "runs 3") || !strings.Contains(string(out), "done") {
		t.Fatalf("the thief did not see the three runs (the check below proves nothing):\n%s", thief.logs())
	}
	// Control: the keys are there, seen from outside.
	var keys []string
	_ = filepath.WalkDir(l.runtime, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".key") {
			keys = append(keys, p)
		}
		return nil
	})
	if len(keys) < 4 {
		t.Errorf("control: %d key files under the runtime directory, want the CA and placeholder keys of the two other runs: %q", len(keys), keys)
	}
	if strings.Contains(string(out), "READ ") {
		t.Errorf("the command of one run read another run's private keys:\n%s", out)
	}
	before.stop(5 * time.Second)
	after.stop(5 * time.Second)
}

// TestAttackLocalModeRenameAboveCover (§13: the secrets): a cover hides
// secrets_dir, not the directories above it, which the user (and so the
// command) may rename. The command moves the parent of secrets_dir away
// (the cover goes with it, the real secrets stay hidden) and puts at
// secrets_dir's path a directory of its own; BotBox's periodic reload
// reads secrets_dir by its path, and would then inject values the command
// chose and lose the real ones (a link to a hidden file is refused by the
// store's os.Root; a value the command writes is not). Requests to the
// allowed host must still carry api-key's real value. secrets_dir is
// named through a link the command may point elsewhere, too.
func TestAttackLocalModeRenameAboveCover(t *testing.T) {
	t.Parallel()
	apiKey := "sk-" + randomHex(t, 16)
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "unused"}})
	secrets := filepath.Join(l.home, "keys", "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(secrets, "api-key"), []byte(apiKey), 0o600)
	for _, p := range []string{filepath.Join(l.home, "keys"), secrets, filepath.Join(secrets, "api-key")} {
		if err := os.Chown(p, l.uid, l.gid); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(l.home, "link")
	if err := os.Symlink(filepath.Join(l.home, "keys"), link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, l.uid, l.gid); err != nil {
		t.Fatal(err)
	}
	config := l.configWithSecrets(t, "attack-rename.yaml", filepath.Join(link, "secrets"))
	mark := l.p.mark(t)
	r := runArgv(t, l.userArgv(nil, l.p.bins.botbox, "exec", "--quiet", "-c", config, "--", "sh", "-c", `
cd "$HOME" && mv keys/secrets keys/secrets-old 2>/dev/null && echo MOVED-COVER
mv keys keys-old 2>/dev/null && mkdir -p keys/secrets && printf sk-planted-by-the-command >keys/secrets/api-key && echo SWAPPED-PARENT
mkdir -p evil/secrets && printf sk-planted-through-the-link >evil/secrets/api-key && ln -s "$HOME/evil" link.new && mv -T link.new link && echo SWAPPED-LINK
sleep 2.5
curl -sS -o /dev/null --max-time 10 -w "%{http_code}" http://`+hostAPI+`/rename/1`))
	if r.code != 0 || strings.Contains(r.stdout, "MOVED-COVER") {
		t.Fatalf("botbox exec: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	ev := l.p.httpEvent(t, mark, "/rename/1")
	if got := ev.Header["Authorization"]; !slices.Equal(got, []string{"Bearer " + apiKey}) {
		t.Errorf("after the command renamed secrets_dir's parent (%q), the allowed host got Authorization %q, want api-key's real value",
			strings.TrimSpace(r.stdout), got)
	}
}

// TestAttackLocalModeSessionBus (§13: "D-Bus"): the user's session bus
// and systemd user manager are Unix sockets in the filesystem, which the
// network namespace does not confine; through either, `systemd-run --user
// CMD` starts a process outside every namespace of botbox exec, with the
// machine's network. Stand-ins listen, as the same user in the machine's
// namespaces, at $XDG_RUNTIME_DIR/bus, $XDG_RUNTIME_DIR/systemd/private
// and the path of DBUS_SESSION_BUS_ADDRESS; the command must reach none
// of them (control: the user outside reaches all three).
func TestAttackLocalModeSessionBus(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	busAddr := filepath.Join(l.home, "dbus-session")
	socks := []string{filepath.Join(l.runtime, "bus"), filepath.Join(l.runtime, "systemd", "private"), busAddr}
	if err := os.Mkdir(filepath.Join(l.runtime, "systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(l.runtime, "systemd"), l.uid, l.gid); err != nil {
		t.Fatal(err)
	}
	srv := startProc(t, "bus-listeners", l.p.dir, nil, l.userArgv(nil, "python3", "-c", `
import socket, sys, threading
def serve(p):
    s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(8)
    while True:
        c, _ = s.accept(); print("connected", p, flush=True); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(p,), daemon=True).start()
import time; time.sleep(0.5); print("ready", flush=True); time.sleep(120)
`, socks[0], socks[1], socks[2])...)
	if !waitFor(startupTimeout, func() bool { return strings.Contains(srv.logs(), "ready") }) {
		t.Fatalf("bus stand-ins did not start: %s", srv.logs())
	}
	connect := `
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); print("REACHED", p)
    except OSError as e:
        print("refused", p, e.errno)
`
	ctl := runArgv(t, l.userArgv(nil, append([]string{"python3", "-c", connect}, socks...)...))
	if strings.Count(ctl.stdout, "REACHED") != 3 {
		t.Fatalf("control: the user outside does not reach the stand-ins:\n%s%s", ctl.stdout, ctl.stderr)
	}
	before := strings.Count(srv.logs(), "connected")
	r := l.mustExec(t, []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=" + busAddr + ",guid=0123456789abcdef0123456789abcdef"}, []string{"--quiet"},
		append([]string{"python3", "-c", connect}, socks...)...)
	if strings.Contains(r.stdout, "REACHED") || strings.Count(srv.logs(), "connected") != before {
		t.Errorf("the command reached the session bus or systemd user manager (a way to start a process outside):\n%s\n%s", r.stdout, srv.logs())
	}
}

// TestAttackLocalModePersistence (§13: persistence after exit): the
// command leaves processes behind in every way it can from inside (in a
// PID and user namespace of its own, in a new session, ignoring SIGHUP
// and SIGTERM), leaves an unreadable directory in the run's public
// directory, and in a second run crashes the helper (SIGABRT to PID 1,
// which the Go runtime does not ignore) with a child still running.
// After each run nothing of it remains: no process, no run directory.
func TestAttackLocalModePersistence(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "sk-" + randomHex(t, 16)}})
	tag := randomHex(t, 3)
	l.mustExec(t, nil, []string{"--quiet"}, "sh", "-c", fmt.Sprintf(`
unshare -Urpf --mount-proc sleep 3%[1]s1 &
setsid sleep 3%[1]s2 &
(trap '' HUP TERM; exec sleep 3%[1]s3) &
pub=$(dirname "$SSL_CERT_FILE")
mkdir -p "$pub/stay/deeper" && touch "$pub/stay/deeper/f" && chmod 000 "$pub/stay"
sleep 0.3; exit 0`, tag))
	r := l.exec(t, nil, []string{"--quiet"}, "sh", "-c", fmt.Sprintf(`sleep 3%[1]s4 & sleep 0.3; kill -ABRT 1; sleep 2; echo SURVIVED`, tag))
	if strings.Contains(r.stdout, "SURVIVED") {
		t.Errorf("the command outlived the helper:\n%s", r.stdout)
	}
	if r.code == 0 {
		t.Errorf("botbox exec exited 0 after the helper died, want a failure")
	}
	if !waitFor(5*time.Second, func() bool { return len(sleepers(tag)) == 0 }) {
		t.Errorf("processes left behind: %v", sleepers(tag))
	}
	l.assertNoLeftovers(t)
}

// sleepers are the PIDs (host namespace) of "sleep 3TAGn".
func sleepers(tag string) []string {
	var out []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), "sleep\x003"+tag) {
			out = append(out, filepath.Base(filepath.Dir(f))+":"+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// configWithSecrets writes the scenario's config with secrets_dir set to
// dir and a resync of a second, and returns its path.
func (l *local) configWithSecrets(t *testing.T, name, dir string) string {
	t.Helper()
	base, err := os.ReadFile(l.p.configPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	for line := range strings.Lines(string(base)) {
		if strings.HasPrefix(line, "secrets_dir:") {
			line = fmt.Sprintf("secrets_dir: %q\nsecrets_resync_seconds: 1\n", dir)
		}
		cfg.WriteString(line)
	}
	config := filepath.Join(l.p.dir, name)
	writeFile(t, config, []byte(cfg.String()), 0o644)
	return config
}

// TestAttackLocalModeMissingSecretsDir (§13: the secrets): a secrets_dir
// that does not exist yet cannot be covered, and the command, as the user,
// may create it (here below the user's home) with values of its own, which
// BotBox's reload would then inject. botbox exec refuses to start instead.
func TestAttackLocalModeMissingSecretsDir(t *testing.T) {
	t.Parallel()
	l := newLocal(t, podConfig{secrets: map[string]string{"api-key": "unused"}})
	config := l.configWithSecrets(t, "attack-missing.yaml", filepath.Join(l.home, "later", "secrets"))
	mark := l.p.mark(t)
	r := runArgv(t, l.userArgv(nil, l.p.bins.botbox, "exec", "--quiet", "-c", config, "--", "sh", "-c", `
mkdir -p "$HOME/later/secrets" && printf sk-planted-by-the-command >"$HOME/later/secrets/api-key" && echo PLANTED
sleep 2.5
curl -sS -o /dev/null --max-time 10 -w "%{http_code}" http://`+hostAPI+`/missing/1`))
	if strings.Contains(r.stdout, "PLANTED") {
		for _, ev := range l.p.events(t, mark) {
			if strings.Contains(strings.Join(ev.Header["Authorization"], " "), "planted") {
				t.Errorf("the allowed host got the value the command planted in a secrets_dir it created: %q", ev.Header["Authorization"])
			}
		}
		t.Errorf("botbox exec ran the command with a secrets_dir that did not exist (exit %d):\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r.code != 1 || !strings.Contains(r.stderr, "secrets_dir") {
		t.Errorf("exit %d, want 1 and an error naming secrets_dir:\n%s", r.code, r.stderr)
	}
}
