package main

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/secretref"
)

const usagePlaceholders = "botbox placeholders print [-c PATH]"

// runPlaceholders is `botbox placeholders print`: for every secret_ref of
// the policy, its environment variable, the file BotBox writes, the
// placeholder in it (read from placeholders.dir, as a running BotBox wrote
// it) and the hosts it may go to: those of the allow rules that reference
// the secret, with the headers and query parameters whose rewrites inject
// it (the only places the placeholder is accepted). It never reads
// secrets_dir, so it cannot print a real value.
func runPlaceholders(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "print" {
		return usageError(stderr, usagePlaceholders, "botbox placeholders: the only subcommand is print")
	}
	fs := newFlagSet("botbox placeholders print", stderr)
	path := configFlag(fs)
	setUsage(fs, usagePlaceholders)
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, usagePlaceholders, "botbox placeholders print: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := config.Load(*path)
	if err != nil {
		printConfigError(stderr, "botbox placeholders print", *path, err)
		return exitError
	}
	if !cfg.Placeholders.Enabled {
		fmt.Fprintf(stderr, "botbox placeholders print: placeholders are not enabled in %s (set placeholders.enabled: true)\n", *path)
		return exitError
	}
	fmt.Fprintf(stdout, "# placeholders.dir: %s (env file: %s)\n", cfg.Placeholders.Dir, filepath.Join(cfg.Placeholders.Dir, "env"))
	refs := cfg.RequiredSecretRefs()
	if len(refs) == 0 {
		fmt.Fprintln(stdout, "# no rule references a secret: there are no placeholders")
		return exitOK
	}
	for _, ref := range refs {
		file := filepath.Join(cfg.Placeholders.Dir, ref)
		ph := "(not written: BotBox writes it once it has loaded the secret; a value under 48 random bits gets none)"
		switch b, err := os.ReadFile(file); {
		case err == nil:
			ph = string(b)
		case !errors.Is(err, iofs.ErrNotExist):
			ph = "(unreadable: " + err.Error() + ")"
		}
		fmt.Fprintf(stdout, "\n%s\n  env:         %s\n  file:        %s\n  placeholder: %s\n  may go to:   %s\n",
			ref, secretref.EnvName(ref), file, ph, strings.Join(hostsOf(cfg, ref), ", "))
	}
	fmt.Fprintln(stdout, "\n# Sent anywhere else (another host, another header or query parameter, the path, the body, default_action allow, a denied host) it is refused: 403, secret_tripwire.")
	return exitOK
}

// hostsOf lists the hosts (with their ports other than 443) of the allow
// rules that reference ref, each with the headers and query parameters
// whose rewrites inject it: the only places its placeholder is accepted.
func hostsOf(cfg *config.Config, ref string) []string {
	var hosts []string
	for _, r := range cfg.Policy.Rules {
		if r.Action != config.ActionAllow {
			continue
		}
		var at []string
		for _, h := range r.HeaderRewrites {
			if h.SecretRef == ref {
				at = append(at, "header "+h.Name)
			}
		}
		for _, q := range r.QueryRewrites {
			if q.SecretRef == ref {
				at = append(at, "query parameter "+q.Name)
			}
		}
		if len(at) == 0 {
			continue
		}
		host := r.Host
		if len(r.AllowedPorts) > 0 && !(len(r.AllowedPorts) == 1 && r.AllowedPorts[0] == 443) {
			ports := make([]string, len(r.AllowedPorts))
			for i, p := range r.AllowedPorts {
				ports[i] = fmt.Sprint(p)
			}
			host += " (ports " + strings.Join(ports, ",") + ")"
		}
		hosts = append(hosts, host+" in "+strings.Join(at, ", "))
	}
	if len(hosts) == 0 {
		return []string{"(nowhere: only deny rules reference it)"}
	}
	return hosts
}
