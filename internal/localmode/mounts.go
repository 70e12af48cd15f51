package localmode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// prepareMounts runs in the helper's new mount namespace: mount events no
// longer propagate back to the host (slave: the host's new mounts still
// show), the directories above the paths of hide that the command could
// rename are pinned (pinAncestors), every path of hide is covered by an
// empty read-only mount, and
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
	if err := pinAncestors(hide); err != nil {
		return err
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

// pinAncestors makes each directory above a hidden path that the command
// could rename (its parent is writable by this user) a mount point, bound
// onto itself with what is mounted below it. The kernel refuses to rename
// or remove a mount point of the caller's mount namespace (EBUSY), and a
// cover moves with a renamed parent: without the pin the command could
// move secrets_dir's parent away and put a directory of its own at the
// path BotBox reads again at every reload (it would then inject the
// values the command chose), or move the base of the runs' private
// directories away so that the next run's keys appear uncovered. The
// shallowest directories are bound first, so each bind holds the deeper
// ones and the covers, made after it.
func pinAncestors(hide []string) error {
	var dirs []string
	for _, p := range hide {
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			if !slices.Contains(dirs, d) && unix.Access(filepath.Dir(d), unix.W_OK) == nil {
				dirs = append(dirs, d)
			}
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue // nothing there to hide below: the cover is skipped too
		}
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("pinning %s above a hidden path (bound onto itself): %w", d, err)
		}
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
