package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/botbox/botbox/internal/admin"
)

// envProbeKeyFile names the file where `botbox run` writes its per-start
// probe key and `botbox probe` reads it, overriding the per-instance
// default (admin.DefaultProbeKeyFile); --probe-key-file / --key-file
// override both. The file must be readable only inside BotBox's container.
const envProbeKeyFile = "BOTBOX_PROBE_KEY_FILE"

// defaultProbeKeyFile is the per-instance default for the metrics port:
// $XDG_RUNTIME_DIR/botbox/probe-PORT.key, else $TMPDIR (or /tmp)
// /botbox-UID/probe-PORT.key.
func defaultProbeKeyFile(getenv func(string) string, metricsPort uint16) string {
	tmp := getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return admin.DefaultProbeKeyFile(getenv("XDG_RUNTIME_DIR"), tmp, os.Getuid(), metricsPort)
}

// probePort is the port `botbox probe` connects to: the URL's, or the
// scheme's default.
func probePort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		switch u.Scheme {
		case "http":
			return 80, nil
		case "https":
			return 443, nil
		}
		return 0, fmt.Errorf("%s: want an http:// or https:// URL", u)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s: port %q is not 1-65535", u, p)
	}
	return uint16(n), nil
}

// runProbe is the exec readiness/startup probe of the static image (which has
// no curl): GET URL with a random nonce, exit 0 only on 200 whose
// X-Botbox-Probe-Auth header is the HMAC of that nonce, path and status
// under the key BotBox wrote at start; 1 otherwise. A process squatting the
// admin port cannot read the key, so it can never pass (TestProbe).
func runProbe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox probe", stderr)
	timeout := fs.Duration("timeout", time.Second, "request timeout")
	keyFile := fs.String("key-file", getenv(envProbeKeyFile), "`FILE` of the probe key BotBox wrote at start (env "+envProbeKeyFile+"; default: the one `botbox run` uses for the URL's port)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	target := "http://127.0.0.1:9090/healthz"
	if fs.NArg() > 0 {
		target = fs.Arg(0)
	}
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintf(stderr, "botbox probe: %v\n", err)
		return exitUsage
	}
	if *keyFile == "" {
		port, err := probePort(u)
		if err != nil {
			fmt.Fprintf(stderr, "botbox probe: %v\n", err)
			return exitUsage
		}
		*keyFile = defaultProbeKeyFile(getenv, port)
	}
	key, err := admin.ReadProbeKey(*keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "botbox probe: %v\n", err)
		return exitError
	}
	nonceBytes := make([]byte, 16)
	if _, err := rand.Read(nonceBytes); err != nil {
		fmt.Fprintf(stderr, "botbox probe: %v\n", err)
		return exitError
	}
	nonce := hex.EncodeToString(nonceBytes)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "botbox probe: %v\n", err)
		return exitUsage
	}
	req.Header.Set(admin.ProbeNonceHeader, nonce)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "botbox probe: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if !admin.VerifyProbe(key, nonce, u.Path, resp.StatusCode, resp.Header.Get(admin.ProbeAuthHeader)) {
		fmt.Fprintf(stderr, "botbox probe: %s did not prove it is this BotBox (no valid %s); another process may hold the port\n", target, admin.ProbeAuthHeader)
		return exitError
	}
	fmt.Fprintf(stdout, "%d %s\n", resp.StatusCode, body)
	if resp.StatusCode != http.StatusOK {
		return exitError
	}
	return exitOK
}
