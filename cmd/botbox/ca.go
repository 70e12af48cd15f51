package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/botbox/botbox/internal/mitm"
)

// runCA implements `botbox ca new`: a development/ephemeral interception CA,
// made with the BotBox image itself so a Pod needs no openssl image.
func runCA(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(stderr, "usage: botbox ca new --out DIR [--days N] [--cn NAME] [--cert-out PATH --key-out PATH]")
		return exitUsage
	}
	fs := newFlagSet("botbox ca new", stderr)
	out := fs.String("out", "", "directory for ca.crt (0444) and ca.key (0400)")
	certOut := fs.String("cert-out", "", "path of the certificate (instead of --out DIR/ca.crt)")
	keyOut := fs.String("key-out", "", "path of the private key (instead of --out DIR/ca.key)")
	days := fs.Int("days", 7, "validity in days (1-3650)")
	cn := fs.String("cn", "botbox-pod-ca", "subject common name")
	ifMissing := fs.Bool("if-missing", false, "exit 0 without writing when both files already exist (init containers re-run when a Pod sandbox is rebuilt)")
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if *days < 1 || *days > 3650 {
		fmt.Fprintf(stderr, "botbox ca new: --days %d out of range 1-3650\n", *days)
		return exitUsage
	}
	if *out == "" && (*certOut == "" || *keyOut == "") {
		fmt.Fprintln(stderr, "botbox ca new: --out DIR, or both --cert-out and --key-out, are required")
		return exitUsage
	}
	if *certOut == "" {
		*certOut = filepath.Join(*out, "ca.crt")
	}
	if *keyOut == "" {
		*keyOut = filepath.Join(*out, "ca.key")
	}
	for _, p := range []string{*certOut, *keyOut} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintf(stderr, "Error: creating %s: %v\n", filepath.Dir(p), err)
			return exitError
		}
	}
	certExists, keyExists := fileExists(*certOut), fileExists(*keyOut)
	if *ifMissing && certExists && keyExists {
		fmt.Fprintf(stdout, "%s and %s already exist; nothing to do\n", *certOut, *keyOut)
		return exitOK
	}
	if certExists != keyExists {
		// Half a CA cannot be completed without losing the key/cert pairing.
		fmt.Fprintf(stderr, "Error: only one of %s and %s exists; remove it to make a new CA\n", *certOut, *keyOut)
		return exitError
	}
	certPEM, keyPEM, err := mitm.NewCA(*cn, time.Duration(*days)*24*time.Hour, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "Error: creating CA: %v\n", err)
		return exitError
	}
	// The key first: if the certificate write fails, a retry is refused
	// rather than leaving a certificate without its key.
	if err := writeExclusive(*keyOut, keyPEM, 0o400); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return exitError
	}
	if err := writeExclusive(*certOut, certPEM, 0o444); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "wrote %s (certificate, 0444) and %s (private key, 0400)\n", *certOut, *keyOut)
	return exitOK
}

// writeExclusive creates path with mode, refusing to overwrite.
func writeExclusive(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil { // umask-proof
		_ = f.Close()
		return fmt.Errorf("setting mode of %s: %w", path, err)
	}
	return f.Close()
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
