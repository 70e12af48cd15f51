package localmode

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The command filter (seccomp), in three parts.
//
// The terminal: the command shares the user's terminal, and TIOCSTI pushes
// bytes into its input queue as if typed: what the command pushes would be
// read by the user's shell once botbox exec has ended, and run outside the
// namespaces (the bubblewrap escape, CVE-2017-5226). TIOCLINUX can do the
// same on a virtual console (paste the selection). A kernel with
// dev.tty.legacy_tiocsti=0 refuses TIOCSTI already; this filter refuses
// both on every kernel.
//
// Sockets no network namespace confines: AF_VSOCK reaches the hypervisor
// (CID 2: a VM's host, WSL2, Firecracker, Docker Desktop's and Lima's VMs,
// whose vsock services forward ports and networks) and every local vsock
// listener, whatever namespace the caller is in, so socket(AF_VSOCK) is
// refused (as Docker's default seccomp profile does). io_uring is refused
// whole: its IORING_OP_SOCKET (Linux 5.19) creates sockets without the
// socket system call this filter sees.
//
// Foreign ABIs: every system call of the 32-bit i386 and arm ABIs and of
// x86-64's x32 is refused, since each numbers the calls differently: the
// filter would otherwise miss them. 32-bit programs therefore cannot run
// under botbox exec.
//
// The filter is installed before the command starts and holds for the
// command and all it starts (seccomp filters are inherited and cannot be
// removed).

// seccomp_data offsets: nr (int), arch (u32), instruction_pointer (u64),
// args[6] (u64); ioctl's request is args[1] and socket's domain args[0],
// whose low 32 bits are what the kernel uses (an unsigned int, an int), so
// only those are compared: setting high bits changes nothing for the
// kernel or for us.
const (
	offNR    = 0
	offArch  = 4
	offArg0  = 16
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
	return 0, fmt.Errorf("the command filter is not built for %s (amd64 and arm64 are)", runtime.GOARCH)
}

// commandFilter returns the BPF program for this build's system call
// numbers: refuse (EPERM) foreign ABIs, x32 system calls, ioctl TIOCSTI and
// TIOCLINUX, socket(AF_VSOCK) and the io_uring calls; allow the rest.
func commandFilter(arch uint32) []unix.SockFilter {
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
		/* 1 */ jeq(arch, 0, 13), // foreign ABI → 15
		/* 2 */ ld(offNR),
		/* 3 */ jset(x32Bit, 11, 0), // x32 → 15
		/* 4 */ jeq(unix.SYS_IOCTL, 0, 3), // not ioctl → 8
		/* 5 */ ld(offArg1),
		/* 6 */ jeq(unix.TIOCSTI, 8, 0), // → 15
		/* 7 */ jeq(unix.TIOCLINUX, 7, 6), // → 15, else → 14
		/* 8 */ jeq(unix.SYS_SOCKET, 0, 2), // not socket → 11
		/* 9 */ ld(offArg0),
		/* 10 */ jeq(unix.AF_VSOCK, 4, 3), // → 15, else → 14
		/* 11 */ jeq(unix.SYS_IO_URING_SETUP, 3, 0), // → 15
		/* 12 */ jeq(unix.SYS_IO_URING_ENTER, 2, 0), // → 15
		/* 13 */ jeq(unix.SYS_IO_URING_REGISTER, 1, 0), // → 15
		/* 14 */ ret(unix.SECCOMP_RET_ALLOW),
		/* 15 */ ret(unix.SECCOMP_RET_ERRNO | errEPERM),
	}
}

// installCommandFilter loads commandFilter on every thread of the
// helper (the command inherits it from the thread that forks it). It needs
// no_new_privs (dropPrivileges) or CAP_SYS_ADMIN.
func installCommandFilter() error {
	arch, err := auditArch()
	if err != nil {
		return err
	}
	prog := commandFilter(arch)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("installing the command filter (seccomp): %w", errno)
	}
	runtime.KeepAlive(prog)
	return nil
}
