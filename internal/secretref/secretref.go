// Package secretref holds the one rule for a secret_ref: the name of a
// secret file in secrets_dir. Config validation refuses a rule whose
// secret_ref breaks it, and the secret store refuses to require such a key,
// so the two can never disagree about which names are loadable.
//
// It does not read files or know where secrets_dir is. It imports nothing
// from BotBox, so that both config and secrets can use it.
//
// Typical use:
//
//	if !secretref.Valid(ref) {
//		return fmt.Errorf("secret_ref %q must be %s", ref, secretref.Rule)
//	}
package secretref

// MaxLen is the longest valid name: the file-name limit of Linux file systems.
const MaxLen = 255

// Rule describes Valid in words, for error messages.
const Rule = "a plain file name in secrets_dir (not empty, no '/', no whitespace or control characters, not starting with '.')"

// Valid reports whether ref is a plain file name that the secrets loader can
// hold: not empty, at most MaxLen bytes, no '/', no leading '.' (dotfiles,
// including Kubernetes' "..data" links, are skipped by the loader), and no
// space, control byte or DEL (which would be invisible or ambiguous in logs).
func Valid(ref string) bool {
	if ref == "" || len(ref) > MaxLen || ref[0] == '.' {
		return false
	}
	for i := 0; i < len(ref); i++ {
		if b := ref[i]; b == '/' || b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// EnvName is the environment variable name of ref's placeholder in the env
// file of placeholders.dir: ASCII letters upper-cased, digits kept, every
// other character (each rune of a multi-byte one) an underscore, and a
// leading underscore when the name would start with a digit
// ("openai-api-key" gives OPENAI_API_KEY). Different refs can give the same
// name ("a-b", "a_b"); config validation refuses such a pair.
func EnvName(ref string) string {
	b := make([]byte, 0, len(ref)+1)
	for _, r := range ref {
		switch {
		case r >= 'a' && r <= 'z':
			b = append(b, byte(r-'a'+'A'))
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b = append(b, byte(r))
		default:
			b = append(b, '_')
		}
	}
	if len(b) == 0 || b[0] >= '0' && b[0] <= '9' {
		b = append([]byte{'_'}, b...)
	}
	return string(b)
}
