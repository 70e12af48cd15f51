package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/botbox/botbox/internal/mitm"
)

const caUsage = "botbox ca new --out DIR [--days N] [--cn NAME] [--if-missing] [--bundle-out PATH] | --cert-out PATH --key-out PATH"

// runCA implements `botbox ca new`: a development/ephemeral interception CA,
// made with the BotBox image itself so a Pod needs no openssl image. The
// files are written by mitm.WriteCA (exclusive create, fsync, no partial
// files, never an overwrite).
func runCA(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(stderr, "usage: "+caUsage)
		return exitUsage
	}
	fs := newFlagSet("botbox ca new", stderr)
	out := fs.String("out", "", "`DIR` for ca.crt (0444) and ca.key (0400), created if missing")
	certOut := fs.String("cert-out", "", "`PATH` of the certificate (instead of --out DIR/ca.crt)")
	keyOut := fs.String("key-out", "", "`PATH` of the private key (instead of --out DIR/ca.key)")
	days := fs.Int("days", 365, "validity in days, `N` from 1 to 3650")
	cn := fs.String("cn", mitm.DefaultCACommonName, "subject common `NAME`")
	ifMissing := fs.Bool("if-missing", false, "exit 0 without writing when both files already exist (init containers re-run when a Pod sandbox is rebuilt)")
	bundleOut := fs.String("bundle-out", "", "also write `PATH` (0444, replaced): the embedded system roots and the CA certificate, for app containers to trust")
	setUsage(fs, caUsage)
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if code, ok := noArgs(fs, "botbox ca new", caUsage, stderr); !ok {
		return code
	}
	if *days < 1 || *days > 3650 {
		return usageError(stderr, caUsage, "botbox ca new: --days %d out of range 1-3650", *days)
	}
	if *out == "" && (*certOut == "" || *keyOut == "") {
		return usageError(stderr, caUsage, "botbox ca new: --out DIR, or both --cert-out and --key-out, are required")
	}
	if *certOut == "" {
		*certOut = filepath.Join(*out, mitm.CACertFile)
	}
	if *keyOut == "" {
		*keyOut = filepath.Join(*out, mitm.CAKeyFile)
	}
	certPEM, keyPEM, err := mitm.NewCA(*cn, time.Duration(*days)*24*time.Hour, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "botbox ca new: creating CA: %v\n", err)
		return exitError
	}
	defer clear(keyPEM)
	err = mitm.WriteCA(*certOut, *keyOut, certPEM, keyPEM)
	var exists *mitm.ExistError
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "wrote %s (certificate, 0444) and %s (private key, 0400), valid %d days\n", *certOut, *keyOut, *days)
		return writeBundle(*bundleOut, *certOut, stdout, stderr)
	case errors.As(err, &exists) && len(exists.Existing) == 2 && *ifMissing:
		fmt.Fprintf(stdout, "%s and %s already exist; nothing to do\n", *certOut, *keyOut)
		return writeBundle(*bundleOut, *certOut, stdout, stderr)
	case errors.As(err, &exists) && len(exists.Existing) == 2:
		fmt.Fprintf(stderr, "botbox ca new: %v\n(keep them with --if-missing, or delete both files to make a new CA; clients trusting the old CA must then trust the new one)\n", err)
	case errors.As(err, &exists):
		// Half a CA cannot be completed without losing the key/cert pairing.
		fmt.Fprintf(stderr, "botbox ca new: %v\n(only one of the two files exists: remove it to make a new CA)\n", err)
	default:
		fmt.Fprintf(stderr, "botbox ca new: %v\n", err)
	}
	return exitError
}

// writeBundle writes the trust bundle of --bundle-out (nothing when empty)
// from the CA certificate at certPath, also when the CA already existed, so
// the bundle follows the CA and the image's roots.
func writeBundle(path, certPath string, stdout, stderr io.Writer) int {
	if path == "" {
		return exitOK
	}
	if err := mitm.WriteTrustBundle(path, certPath); err != nil {
		fmt.Fprintf(stderr, "botbox ca new: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "wrote %s (system roots and the CA certificate, 0444)\n", path)
	return exitOK
}
