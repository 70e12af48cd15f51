// Package echo bounds how much untrusted text an error or log message
// repeats: configuration values, Host headers and TLS server names are
// clipped to one length with one ellipsis everywhere in BotBox (config,
// hostport, rewrite, mitm), so that a hostile or mistaken input cannot
// flood a log line and every message looks the same.
//
// It does not quote or escape: callers format the clipped text with %q or
// inside quotes as their message requires. It has no state and imports
// nothing from BotBox.
//
// Typical use:
//
//	return fmt.Errorf("invalid host %q: %s", echo.Clip(in), reason)
package echo

import "unicode/utf8"

// Max is the most bytes of the input that Clip keeps.
const Max = 64

// Ellipsis is appended by Clip when it cut the input.
const Ellipsis = "..."

// Clip returns s when it is at most Max bytes long, otherwise its first Max
// bytes (fewer when that would split a UTF-8 sequence) followed by Ellipsis.
// The result is at most Max+len(Ellipsis) bytes; it is valid UTF-8 when s is.
func Clip(s string) string {
	if len(s) <= Max {
		return s
	}
	cut := Max
	// Back up to the start of a rune, at most utf8.UTFMax-1 bytes.
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + Ellipsis
}
