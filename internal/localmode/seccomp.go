package localmode

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The terminal filter. The command shares the user's terminal, and
// TIOCSTI pushes bytes into its input queue as if typed: what the command
// pushes would be read by the user's shell once botbox exec has ended, and
// run outside the namespaces (the bubblewrap escape, CVE-2017-5226).
// TIOCLINUX can do the same on a virtual console (paste the selection). A
// kernel with dev.tty.legacy_tiocsti=0 refuses TIOCSTI already; this
// filter refuses both on every kernel, before the command starts, to the
// command and all it starts (seccomp filters are inherited and cannot be
// removed).
//
// Every system call of a foreign ABI is refused too (the 32-bit i386 and
// arm ABIs, x86-64's x32), since each numbers ioctl differently: the
// filter would otherwise miss them. 32-bit programs therefore cannot run
// under botbox exec.

// seccomp_data offsets: nr (int), arch (u32), instruction_pointer (u64),
// args[6] (u64); ioctl's request is args[1], whose low 32 bits are what
// the kernel uses (the request is an unsigned int), so only those are
// compared: setting high bits changes nothing for the kernel or for us.
const (
	offNR    = 0
	offArch  = 4
	offArg1  = 16 + 8
	x32Bit   = 0x40000000
	errEPERM = 1
)

// auditArch is this build's native seccomp architecture.
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("the terminal filter is not built for %s (amd64 and arm64 are)", runtime.GOARCH)
}

// terminalFilter returns the BPF program: refuse (EPERM) foreign ABIs,
// x32 system calls, and ioctl TIOCSTI and TIOCLINUX; allow the rest.
func terminalFilter(arch uint32, ioctlNR uint32) []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	jset := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: jt, Jf: jf, K: k}
	}
	ld := func(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	ret := func(k uint32) unix.SockFilter { return stmt(unix.BPF_RET|unix.BPF_K, k) }
	// Jump offsets count the instructions to skip after this one.
	return []unix.SockFilter{
		/* 0 */ ld(offArch),
		/* 1 */ jeq(arch, 0, 7), // foreign ABI → 9
		/* 2 */ ld(offNR),
		/* 3 */ jset(x32Bit, 5, 0), // x32 → 9
		/* 4 */ jeq(ioctlNR, 0, 3), // not ioctl → 8
		/* 5 */ ld(offArg1),
		/* 6 */ jeq(unix.TIOCSTI, 2, 0), // → 9
		/* 7 */ jeq(unix.TIOCLINUX, 1, 0), // → 9
		/* 8 */ ret(unix.SECCOMP_RET_ALLOW),
		/* 9 */ ret(unix.SECCOMP_RET_ERRNO | errEPERM),
	}
}

// installTerminalFilter loads terminalFilter on every thread of the
// helper (the command inherits it from the thread that forks it). It needs
// no_new_privs (dropPrivileges) or CAP_SYS_ADMIN.
func installTerminalFilter() error {
	arch, err := auditArch()
	if err != nil {
		return err
	}
	prog := terminalFilter(arch, unix.SYS_IOCTL)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("installing the terminal filter (seccomp): %w", errno)
	}
	runtime.KeepAlive(prog)
	return nil
}
