// Package config reads, validates and renders the BotBox configuration file.
//
// The file is YAML with the keys of the reference BotBox (reoring/botbox)
// plus the additions documented in docs/config.md. It is decoded strictly
// into unexported wire structs (unknown keys, duplicate keys, an empty file
// and a second YAML document are errors), then defaults are filled in and
// every value is validated, and the result is
// converted into the domain type [Config] (read-only once ApplyEnv ran).
// Every problem found is reported at once — unknown and duplicate keys,
// wrong types and invalid values together — each as a [*FieldError] carrying
// its key path and line, joined with errors.Join; only a YAML syntax error,
// an empty file or a second document stop early. Keys and types are checked
// by walking the YAML node tree along the wire structs, never by reading
// go-yaml's error text.
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
//		ps := config.Problems(err)
//		if len(ps) == 0 { fmt.Fprintln(stderr, err) } // not read: "config file not found: PATH"
//		for _, p := range ps { fmt.Fprintln(stderr, p) }
//		return 1
//	}
//	if err := config.ApplyEnv(cfg, os.Getenv); err != nil { … }
//	for _, w := range cfg.Warnings { logger.Warn(w.Message, "key", w.Path) }
package config
