package localmode

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// The kernel settings that refuse unprivileged user namespaces.
const (
	sysctlUnprivClone  = "/proc/sys/kernel/unprivileged_userns_clone"             // Debian, older Ubuntu: 0 refuses
	sysctlMaxUserNS    = "/proc/sys/user/max_user_namespaces"                     // 0 refuses
	sysctlAppArmorUser = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns" // Ubuntu 23.10+: 1 restricts
)

// ErrUserNamespaces is wrapped by the error of Start when the kernel
// refuses the user namespace (or its capabilities) to this user.
var ErrUserNamespaces = errors.New("unprivileged user namespaces are not available")

// diagnoseUserNS names the kernel setting that refused err, and the two
// ways out, when one of them is set; otherwise it returns err.
func diagnoseUserNS(err error) error {
	return diagnoseWith(err, func(p string) string {
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	})
}

func diagnoseWith(err error, read func(string) string) error {
	var setting, value, fix string
	switch {
	case read(sysctlUnprivClone) == "0":
		setting, value, fix = "kernel.unprivileged_userns_clone", "0", "sudo sysctl -w kernel.unprivileged_userns_clone=1"
	case read(sysctlMaxUserNS) == "0":
		setting, value, fix = "user.max_user_namespaces", "0", "sudo sysctl -w user.max_user_namespaces=15000"
	case read(sysctlAppArmorUser) == "1":
		setting, value, fix = "kernel.apparmor_restrict_unprivileged_userns", "1",
			"an AppArmor profile that allows userns for the botbox binary (docs/local.md), or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
	case errors.Is(err, os.ErrPermission):
		// No sysctl says no: a seccomp profile (a container runtime's
		// default forbids new namespaces without CAP_SYS_ADMIN) or an LSM.
		return fmt.Errorf("%w: %v\n"+
			"The kernel allows them, so something in front of it refuses them: inside a container, its seccomp profile "+
			"(Docker's and Podman's default forbid new namespaces; run the container with --security-opt seccomp=unconfined, "+
			"or run botbox exec on the host), or a security module (SELinux, AppArmor)", ErrUserNamespaces, err)
	default:
		return err
	}
	return fmt.Errorf("%w: the kernel refuses them to this user (%s = %s): %v\n"+
		"Two ways out:\n"+
		"  1. allow them: %s (persist it in /etc/sysctl.d/)\n"+
		"  2. run botbox exec as root (sudo botbox exec ...): the command then runs as root, without any capability",
		ErrUserNamespaces, setting, value, err, fix)
}
