package localmode

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// prepareMounts runs in the helper's new mount namespace: mount events no
// longer propagate back to the host (slave: the host's new mounts still
// show), every path of hide is covered by an empty read-only mount, and
// /proc is mounted for the new PID namespace, so the command sees only its
// own processes. A path that does not exist is skipped (nothing to hide).
//
// Covering rather than building a view without them keeps everything else
// the user's tools expect where it is (the home directory, /usr, /tmp); the
// covers are locked to the command, which has no capability in this
// namespace, and the kernel locks them together in any namespace the
// command makes itself, so neither can uncover what is below (docs/local.md).
func prepareMounts(hide []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	for _, p := range hide {
		if err := cover(p); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc for the command's PID namespace: %w", err)
	}
	return nil
}

// cover puts an empty read-only tmpfs over the directory p, or the empty
// /dev/null (bound read-only) over the file p.
func cover(p string) error {
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hiding %s: %w", p, err)
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if fi.IsDir() {
		if err := unix.Mount("botbox-hidden", p, "tmpfs", flags|unix.MS_RDONLY, "size=4k,nr_inodes=1,mode=0555"); err != nil {
			return fmt.Errorf("hiding directory %s (empty tmpfs over it): %w", p, err)
		}
		return nil
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("hiding file %s (/dev/null over it): %w", p, err)
	}
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("hiding file %s (read-only): %w", p, err)
	}
	return nil
}
