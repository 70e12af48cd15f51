package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runProbe is the exec readiness/startup probe of the static image (which has
// no curl): GET URL, exit 0 on 200, 1 otherwise.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox probe", stderr)
	timeout := fs.Duration("timeout", time.Second, "request timeout")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	url := "http://127.0.0.1:9090/healthz"
	if fs.NArg() > 0 {
		url = fs.Arg(0)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitUsage
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	fmt.Fprintf(stdout, "%d %s\n", resp.StatusCode, body)
	if resp.StatusCode != http.StatusOK {
		return exitError
	}
	return exitOK
}
