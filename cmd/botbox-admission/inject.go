package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/botbox/botbox/internal/inject"
)

const injectUsage = "botbox-admission inject -f FILE|- [--image IMG] [--config-map NAME] [--secret NAME] [--interception] [--ipv6] [--dns-guard] [--placeholders [--placeholders-dir DIR]]"

// injectFlags registers the options `botbox-admission inject` and `botbox-admission webhook`
// share; the returned function completes them after parsing.
func injectFlags(fs *flag.FlagSet) func() inject.Options {
	d := inject.DefaultOptions()
	o := &d
	fs.StringVar(&o.Image, "image", d.Image, "BotBox `IMAGE` for ca-init, iptables-init and the sidecar")
	fs.StringVar(&o.ConfigMap, "config-map", d.ConfigMap, "ConfigMap `NAME` holding config.yaml")
	fs.StringVar(&o.Secret, "secret", d.Secret, "Secret `NAME` holding the credentials")
	fs.BoolVar(&o.Interception, "interception", false, "HTTPS interception: a per-Pod CA, 443 redirected, apps trust the CA bundle")
	fs.BoolVar(&o.IPv6, "ipv6", false, "mirror the egress rules for IPv6 (BOTBOX_ENABLE_IPV6=1); without it IPv6 is uncontrolled")
	fs.BoolVar(&o.DNSGuard, "dns-guard", false, "redirect port 53 to BotBox's DNS guard (BOTBOX_DNS_GUARD_PORT)")
	placeholders := fs.Bool("placeholders", false, "share BotBox's placeholder directory read-only with the app containers")
	dir := fs.String("placeholders-dir", inject.DefaultPlaceholdersDir, "`DIR` of the placeholder files in every container")
	return func() inject.Options {
		if *placeholders {
			o.PlaceholdersDir = *dir
		}
		return *o
	}
}

// runInject implements `botbox-admission inject`: the workloads of FILE ("-" for
// stdin) with BotBox injected, on stdout.
func runInject(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox-admission inject", stderr)
	file := fs.String("f", "", "`FILE` of YAML documents, - for standard input")
	opts := injectFlags(fs)
	setUsage(fs, injectUsage)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := noArgs(fs, "botbox-admission inject", injectUsage, stderr); !ok {
		return code
	}
	if *file == "" {
		return usageError(stderr, injectUsage, "botbox-admission inject: -f FILE is required")
	}
	in := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			fmt.Fprintf(stderr, "botbox-admission inject: %v\n", err)
			return exitError
		}
		defer f.Close()
		in = f
	}
	if err := inject.YAML(in, stdout, opts()); err != nil {
		var refused *inject.RefusedError
		if errors.As(err, &refused) {
			fmt.Fprintf(stderr, "botbox-admission inject: %v\n(see docs/deploy.md, \"botbox-admission inject\")\n", err)
			return exitError
		}
		fmt.Fprintf(stderr, "botbox-admission inject: %s: %v\n", *file, err)
		return exitError
	}
	return exitOK
}
