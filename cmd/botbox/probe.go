package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/botbox/botbox/internal/admin"
)

// Where `botbox run` writes its per-start probe key and `botbox probe`
// reads it, unless --probe-key-file / --key-file or this variable says
// otherwise. The file must be readable only inside BotBox's container.
const (
	envProbeKeyFile     = "BOTBOX_PROBE_KEY_FILE"
	defaultProbeKeyFile = "/tmp/botbox-probe.key"
)

func probeKeyFileDefault(getenv func(string) string) string {
	if v := getenv(envProbeKeyFile); v != "" {
		return v
	}
	return defaultProbeKeyFile
}

// runProbe is the exec readiness/startup probe of the static image (which has
// no curl): GET URL with a random nonce, exit 0 only on 200 whose
// X-Botbox-Probe-Auth header is the HMAC of that nonce, path and status
// under the key BotBox wrote at start; 1 otherwise. A process squatting the
// admin port cannot read the key, so it can never pass (TestProbe).
func runProbe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox probe", stderr)
	timeout := fs.Duration("timeout", time.Second, "request timeout")
	keyFile := fs.String("key-file", probeKeyFileDefault(getenv), "the probe key BotBox wrote at start (env "+envProbeKeyFile+")")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	target := "http://127.0.0.1:9090/healthz"
	if fs.NArg() > 0 {
		target = fs.Arg(0)
	}
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitUsage
	}
	key, err := admin.ReadProbeKey(*keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitError
	}
	nonceBytes := make([]byte, 16)
	if _, err := rand.Read(nonceBytes); err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitError
	}
	nonce := hex.EncodeToString(nonceBytes)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitUsage
	}
	req.Header.Set(admin.ProbeNonceHeader, nonce)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if !admin.VerifyProbe(key, nonce, u.Path, resp.StatusCode, resp.Header.Get(admin.ProbeAuthHeader)) {
		fmt.Fprintf(stderr, "probe: %s did not prove it is this BotBox (no valid %s); another process may hold the port\n", target, admin.ProbeAuthHeader)
		return exitError
	}
	fmt.Fprintf(stdout, "%d %s\n", resp.StatusCode, body)
	if resp.StatusCode != http.StatusOK {
		return exitError
	}
	return exitOK
}
