// Package config reads, validates and renders the BotBox configuration file.
//
// The file is YAML with the keys of the reference BotBox (reoring/botbox)
// plus the additions documented in docs/config.md. It is decoded strictly
// into unexported wire structs (go.yaml.in/yaml/v3 with KnownFields: unknown
// keys, duplicate keys, an empty file and a second YAML document are errors),
// then defaults are filled in and every value is validated, and the result is
// converted into the immutable domain type [Config]. Every problem found is
// reported at once, each as a [*FieldError] carrying its key path and line,
// joined with errors.Join.
//
// Host names of policy rules are canonicalised with package hostport, so the
// policy, the proxy and the interception listener compare the same strings.
//
// The package does not read secrets, CA files or the upstream CA bundle: it
// only checks the syntax of those references. It has no global state.
//
// Typical use:
//
//	cfg, err := config.Load(path)
//	if err != nil {
//		for _, p := range config.Problems(err) { fmt.Fprintln(stderr, p) }
//		return 1
//	}
//	if err := config.ApplyEnv(cfg, os.Getenv); err != nil { … }
//	for _, w := range cfg.Warnings { logger.Warn(w.Message, "key", w.Path) }
package config
