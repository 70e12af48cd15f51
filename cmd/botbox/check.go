package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/mitm"
	"github.com/botbox/botbox/internal/rewrite"
	"github.com/botbox/botbox/internal/secrets"
	"github.com/botbox/botbox/internal/upstream"
)

const checkUsage = "botbox check [--files] [-c PATH | PATH]"

// runCheck validates a config file: the effective config on stdout and exit
// 0, or every problem (key path and line) on stderr and exit 1. The file is
// named with -c/--config or as the only argument; anything else is a usage
// error (exit 2), so that check never validates a file other than the one
// the user named. With --files it also opens what the config refers to (see
// checkFiles).
func runCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet("botbox check", stderr)
	flagPath := configFlag(fs)
	files := fs.Bool("files", false, "also check that the secret files the rules name (secret_ref in secrets_dir) and the CA files exist and are usable; secret values are never printed")
	setUsage(fs, checkUsage)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	path, code, ok := configPathArg(fs, *flagPath, "botbox check", checkUsage, stderr)
	if !ok {
		return code
	}
	cfg, err := config.Load(path)
	if err != nil {
		printConfigError(stderr, "botbox check", path, err)
		return exitError
	}
	if err := config.ApplyEnv(cfg, getenv); err != nil {
		fmt.Fprintf(stderr, "botbox check: %v\n", err)
		return exitError
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "warning: %s: %s\n", w.Path, w.Message)
	}
	out, err := cfg.Effective()
	if err != nil {
		fmt.Fprintf(stderr, "rendering effective config: %v\n", err)
		return exitError
	}
	_, _ = stdout.Write(out)
	if *files {
		problems, checked := checkFiles(cfg)
		if len(problems) > 0 {
			fmt.Fprintf(stderr, "%s: the configuration is valid, but the files it names have %d %s:\n", path, len(problems), plural(len(problems), "problem", "problems"))
			for _, p := range problems {
				fmt.Fprintf(stderr, "  %s\n", p)
			}
			return exitError
		}
		fmt.Fprintf(stderr, "%s: the configuration is valid; %s\n", path, checked)
		return exitOK
	}
	fmt.Fprintf(stderr, "%s: the configuration is valid\n", path)
	return exitOK
}

// checkFiles opens what cfg refers to with the code BotBox runs with, and
// returns one line per problem, or a summary of what was checked:
//
//   - every secret_ref is loaded from secrets_dir by package secrets (a
//     missing file, a symlink leaving the directory, a non-UTF-8 or
//     oversized file), and every rule's header rewrites are applied with it
//     by package rewrite (a value with CR/LF that would make every request a
//     500);
//   - the interception CA, when enabled, is loaded by mitm.LoadCA;
//   - upstream_ca_file, when set, is loaded by upstream.RootPool.
//
// It never prints a secret value: package secrets logs key names only and
// rewrite errors name the header and secret_ref.
func checkFiles(cfg *config.Config) (problems []string, checked string) {
	var done []string
	refs := cfg.ReadySecretRefs()
	if len(refs) > 0 {
		problems = append(problems, checkSecrets(cfg, refs)...)
		done = append(done, fmt.Sprintf("%d %s", len(refs), plural(len(refs), "secret", "secrets")))
	}
	if cfg.Interception.Enabled {
		if _, err := mitm.LoadCA(cfg.Interception.CACertPath, cfg.Interception.CAKeyPath, nil); err != nil {
			problems = append(problems, "https_interception: "+err.Error())
		}
		done = append(done, "the interception CA")
	}
	if cfg.UpstreamCAFile != "" {
		if _, err := upstream.RootPool(cfg.UpstreamCAFile); err != nil {
			problems = append(problems, "upstream_ca_file: "+err.Error())
		}
		done = append(done, "upstream_ca_file")
	}
	if len(done) == 0 {
		return problems, "it refers to no files"
	}
	return problems, "found and usable: " + strings.Join(done, ", ")
}

// checkSecrets loads secrets_dir once, as the proxy does at start-up.
func checkSecrets(cfg *config.Config, refs []string) []string {
	dir, err := filepath.Abs(cfg.SecretsDir)
	if err != nil {
		dir = cfg.SecretsDir
	}
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return []string{fmt.Sprintf("secrets_dir: directory %s does not exist (needed for %s)", dir, strings.Join(refs, ", "))}
	case err != nil:
		return []string{fmt.Sprintf("secrets_dir: %v", err)}
	case !fi.IsDir():
		return []string{fmt.Sprintf("secrets_dir: %s is not a directory", dir)}
	}
	logs := &keyLogs{}
	store, err := secrets.Open(secrets.Options{Dir: dir, Required: refs, Logger: slog.New(logs)})
	if err != nil {
		return []string{fmt.Sprintf("secrets_dir: %v", err)}
	}
	var problems []string
	for _, l := range logs.lines() {
		if slices.Contains(refs, l.key) { // files no rule uses do not matter here
			problems = append(problems, "secrets_dir: "+l.text)
		}
	}
	for _, ref := range store.Missing() {
		problems = append(problems, fmt.Sprintf("secret_ref %q (%s): no usable file %s", ref, usedBy(cfg, ref), filepath.Join(dir, ref)))
	}
	snap := store.Snapshot()
	for i, r := range cfg.Policy.Rules {
		set, err := rewrite.CompileRule(r)
		if err != nil {
			problems = append(problems, fmt.Sprintf("egress_policy.rules[%d]: %v", i, err))
			continue
		}
		if _, err := set.Apply(http.Header{}, snap); err != nil {
			if _, missing := errors.AsType[*rewrite.MissingSecretError](err); !missing {
				problems = append(problems, fmt.Sprintf("egress_policy.rules[%d] (host %s): %v", i, r.Host, err))
			}
		}
		// A query value is query-escaped, so any secret fits; only a
		// missing one fails, and Missing above reports it.
	}
	return problems
}

// usedBy names the header and query rewrites and the credentials that
// use ref.
func usedBy(cfg *config.Config, ref string) string {
	var at []string
	for _, c := range cfg.Credentials {
		if slices.Contains(c.SecretRefs(), ref) {
			at = append(at, "credentials."+c.Name)
		}
	}
	for i, r := range cfg.Policy.Rules {
		for j, h := range r.HeaderRewrites {
			if h.SecretRef == ref {
				at = append(at, fmt.Sprintf("egress_policy.rules[%d].header_rewrites[%d]", i, j))
			}
		}
		for j, q := range r.QueryRewrites {
			if q.SecretRef == ref {
				at = append(at, fmt.Sprintf("egress_policy.rules[%d].query_rewrites[%d]", i, j))
			}
		}
	}
	return strings.Join(at, ", ")
}

// keyLogs is a slog.Handler that keeps the store's warnings about one file
// (those with a "key" attribute) as "message: key=... error=...". The
// store's own summary lines are left out: checkSecrets reports each
// missing key itself.
type keyLogs struct {
	mu  sync.Mutex
	out []keyLog
}

type keyLog struct{ key, text string }

func (h *keyLogs) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *keyLogs) Handle(_ context.Context, r slog.Record) error {
	var attrs []string
	key, hasKey := "", false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" {
			key, hasKey = a.Value.String(), true
		}
		attrs = append(attrs, a.Key+"="+a.Value.String())
		return true
	})
	if hasKey {
		h.mu.Lock()
		h.out = append(h.out, keyLog{key: key, text: r.Message + ": " + strings.Join(attrs, " ")})
		h.mu.Unlock()
	}
	return nil
}

func (h *keyLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *keyLogs) WithGroup(string) slog.Handler      { return h }

func (h *keyLogs) lines() []keyLog {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.out)
}
