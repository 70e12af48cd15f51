package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/botbox/botbox/internal/inject"
)

const injectUsage = "botbox-admission inject -f FILE|- [--image IMG] [--config-map NAME] [--secret NAME] [--interception] [--ipv6=false] [--dns-guard=false] [--dns-servers IPS] [--allowed-image-registries HOSTS] [--allowed-csi-drivers NAMES] [--placeholders [--placeholders-dir DIR]] [--pass-unknown]"

// injectFlags registers the options `botbox-admission inject` and `botbox-admission webhook`
// share; the returned function completes them after parsing.
func injectFlags(fs *flag.FlagSet) func() inject.Options {
	d := inject.DefaultOptions()
	o := &d
	fs.StringVar(&o.Image, "image", d.Image, "BotBox `IMAGE` for ca-init, iptables-init and the sidecar")
	fs.StringVar(&o.ConfigMap, "config-map", d.ConfigMap, "ConfigMap `NAME` holding config.yaml")
	fs.StringVar(&o.Secret, "secret", d.Secret, "Secret `NAME` holding the credentials")
	fs.BoolVar(&o.Interception, "interception", false, "HTTPS interception: a per-Pod CA, 443 redirected, apps trust the CA bundle")
	fs.BoolVar(&o.IPv6, "ipv6", d.IPv6, "mirror the egress rules for IPv6 (BOTBOX_ENABLE_IPV6=1); with --ipv6=false IPv6 is uncontrolled")
	fs.BoolVar(&o.DNSGuard, "dns-guard", d.DNSGuard, "redirect port 53 to BotBox's DNS guard (BOTBOX_DNS_GUARD_PORT); with --dns-guard=false port 53 is open to every host")
	fs.StringVar(&o.DNSServers, "dns-servers", "", "comma-separated resolver `IPS` port 53 may reach (BOTBOX_DNS_SERVERS on the init step)")
	registries := fs.String("allowed-image-registries", "", "comma-separated registry `HOSTS` every container image must come from (docker.io for names without a host; empty: any)")
	csiDrivers := fs.String("allowed-csi-drivers", "", "comma-separated inline CSI drivers and volume populators (Kind.apiGroup) a Pod may use (empty: none)")
	placeholders := fs.Bool("placeholders", false, "share BotBox's placeholder directory read-only with the app containers")
	dir := fs.String("placeholders-dir", inject.DefaultPlaceholdersDir, "`DIR` of the placeholder files in every container")
	return func() inject.Options {
		if *placeholders {
			o.PlaceholdersDir = *dir
		}
		o.AllowedImageRegistries = splitList(*registries)
		o.AllowedCSIDrivers = splitList(*csiDrivers)
		return *o
	}
}

// splitList splits a comma-separated flag value, dropping blanks around
// entries; "" is no entry.
func splitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// runInject implements `botbox-admission inject`: the workloads of FILE ("-" for
// stdin) with BotBox injected, on stdout.
func runInject(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox-admission inject", stderr)
	file := fs.String("f", "", "`FILE` of YAML documents, - for standard input")
	opts := injectFlags(fs)
	passUnknown := fs.Bool("pass-unknown", false, "copy objects of unknown kinds that carry a Pod template unchanged, with a warning, instead of refusing them")
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
	o := opts()
	for _, w := range o.Weaknesses() {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if err := inject.YAML(in, stdout, o, inject.ReadOptions{PassUnknown: *passUnknown, Warn: stderr}); err != nil {
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
