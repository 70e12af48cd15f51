package netfilter

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Backend is how the rules reach the kernel. Both backends install the
// same Plan; only the mechanism differs.
type Backend string

// The values of BOTBOX_NETFILTER_BACKEND.
const (
	// BackendAuto uses nftables when the kernel answers a read-only
	// nf_tables request (ProbeNFTables), else iptables.
	BackendAuto Backend = "auto"
	// BackendNFTables talks netlink to nf_tables: no program needed, BotBox's
	// own tables "ip botbox" and "ip6 botbox".
	BackendNFTables Backend = "nftables"
	// BackendIPTables runs iptables-restore and iptables-save (legacy or
	// iptables-nft): BotBox's chains in the nat and filter tables.
	BackendIPTables Backend = "iptables"
)

// System is what install, remove and auto-detection reach: the iptables
// programs (and sysctls) through Runner, nf_tables through NFT.
type System struct {
	Runner Runner
	NFT    NFTDialer
}

// ResolveBackend turns BackendAuto into the backend to use: nftables when
// ProbeNFTables succeeds, else iptables with a note on stderr saying why.
// A permission error is returned instead (iptables would be refused too).
// Other values are returned as they are.
func ResolveBackend(b Backend, sys System, stderr io.Writer) (Backend, error) {
	if b != BackendAuto {
		return b, nil
	}
	err := ProbeNFTables(sys.NFT)
	switch {
	case err == nil:
		return BackendNFTables, nil
	case errors.Is(err, ErrNFTPermission):
		return "", checkError("ERROR: nftables refused the request ("+err.Error()+").", permissionHint)
	}
	fmt.Fprintf(stderr, "[NOTE] %s=auto: nftables is not available (%v); using iptables.\n", EnvBackend, err)
	return BackendIPTables, nil
}

// InstallWith installs s with the backend s.Backend resolves to.
func InstallWith(ctx context.Context, s Settings, sys System, stdout, stderr io.Writer) error {
	b, err := ResolveBackend(s.Backend, sys, stderr)
	if err != nil {
		return err
	}
	if b == BackendNFTables {
		return InstallNFTables(ctx, s, sys.NFT, sys.Runner, stdout, stderr)
	}
	return Install(ctx, s, sys.Runner, stdout, stderr)
}

// RemoveWith removes BotBox's rules. With an explicit backend it removes
// that backend's rules only (rules the other backend installed stay). With
// auto it removes whatever BotBox installed, by either backend: the
// nftables tables when nf_tables answers, then the iptables chains when the
// iptables programs exist; a backend that is unavailable cannot have rules
// to remove here and is skipped with a note, but at least one must be
// available. README.md, "Two backends in one namespace".
func RemoveWith(ctx context.Context, s Settings, sys System, stdout, stderr io.Writer) error {
	if s.Backend != BackendAuto {
		if s.Backend == BackendNFTables {
			return RemoveNFTables(ctx, sys.NFT, stdout)
		}
		return Remove(ctx, s, sys.Runner, stdout, stderr)
	}
	done := false
	switch err := ProbeNFTables(sys.NFT); {
	case err == nil:
		if err := RemoveNFTables(ctx, sys.NFT, stdout); err != nil {
			return err
		}
		done = true
	case errors.Is(err, ErrNFTPermission):
		return checkError("ERROR: nftables refused the request ("+err.Error()+").", permissionHint)
	default:
		fmt.Fprintf(stderr, "[NOTE] %s=auto: nftables is not available (%v); nftables rules skipped.\n", EnvBackend, err)
	}
	if err := lookTools(sys.Runner, IPv4); err != nil {
		if !done {
			return checkError(
				"ERROR: neither nftables nor iptables is available ("+err.Error()+").",
				"  Run `botbox netfilter remove` where the rules were installed, as root with CAP_NET_ADMIN.")
		}
		fmt.Fprintf(stderr, "[NOTE] %s=auto: iptables is not available (%v); iptables rules skipped.\n", EnvBackend, err)
		return nil
	}
	return Remove(ctx, s, sys.Runner, stdout, stderr)
}

// PrintWith prints the families' rules in the syntax of backend b:
// nftables prints nft syntax, anything else iptables-restore payloads. The
// caller resolves BackendAuto first (cmd/botbox probes like install, and
// prints iptables when the probe fails, for example without privilege).
func PrintWith(s Settings, b Backend, families []Family, w io.Writer) error {
	if b == BackendNFTables {
		return PrintNFTables(s, families, w)
	}
	return PrintFamilies(s, families, w)
}
