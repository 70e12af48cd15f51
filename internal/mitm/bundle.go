package mitm

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// TrustBundle is the PEM file an app container trusts when its HTTPS is
// intercepted: the embedded Mozilla roots (golang.org/x/crypto/x509roots/
// fallback, the same the proxy falls back to) followed by the Pod's CA
// certificate caPEM. Roots the bundle carries with a constraint (a
// distrust-after date, which PEM cannot express) are left out: a client
// would trust them unconstrained. caPEM must hold a certificate.
func TrustBundle(caPEM []byte) ([]byte, error) {
	if _, err := parseCertPEM(caPEM); err != nil {
		return nil, fmt.Errorf("trust bundle: %w", err)
	}
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, fmt.Errorf("trust bundle: %w", err)
		}
	}
	b.Write(bytes.TrimSpace(caPEM))
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// WriteTrustBundle writes TrustBundle(CA certificate at certPath) to path,
// mode 0444, replacing any previous bundle atomically (a temporary file in
// the same directory, fsynced, then renamed): an init container that runs
// again refreshes it, and a reader never sees half a file.
func WriteTrustBundle(path, certPath string) error {
	caPEM, _, err := readPEMFile(certPath)
	if err != nil {
		return fmt.Errorf("trust bundle: reading the CA certificate: %w", err)
	}
	data, err := TrustBundle(caPEM)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".bundle-*")
	if err != nil {
		return fmt.Errorf("writing trust bundle: %w", err)
	}
	tmp := f.Name()
	werr := func() error {
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Chmod(0o444); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr == nil {
		werr = syncDir(dir)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing trust bundle %s: %w", path, werr)
	}
	return nil
}
