package h1parse

// validHeaderFieldByte reports whether c may appear in a field name: the
// RFC 9110 token set, the same table as textproto's validHeaderFieldByte.
func validHeaderFieldByte(c byte) bool {
	const mask = 0 |
		(1<<(10)-1)<<'0' |
		(1<<(26)-1)<<'a' |
		(1<<(26)-1)<<'A' |
		1<<'!' |
		1<<'#' |
		1<<'$' |
		1<<'%' |
		1<<'&' |
		1<<'\'' |
		1<<'*' |
		1<<'+' |
		1<<'-' |
		1<<'.' |
		1<<'^' |
		1<<'_' |
		1<<'`' |
		1<<'|' |
		1<<'~'
	return ((uint64(1)<<c)&(mask&(1<<64-1)) |
		(uint64(1)<<(c-64))&(mask>>64)) != 0
}

// validHeaderValueByte reports whether c may appear in a field value: VCHAR,
// obs-text, SP and HTAB, the same rule as textproto's validHeaderValueByte.
func validHeaderValueByte(c byte) bool {
	return c == '\t' || c >= 0x20 && c != 0x7f
}

// pathByte reports whether c, in the path of an origin-form target, is left
// exactly as it is by url.ParseRequestURI: neither unescaped ('%') nor one
// that url's path escaping would change (which would set RawPath).
// TestPathByteMatchesNetURL checks the set against net/url for every byte.
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '/', '$', '&', '+', ',', ':', ';', '=', '@':
		return true
	}
	return false
}

// asciiEqualFold reports whether b equals the lower-case ASCII string lower,
// ignoring ASCII case.
func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// parsePlainDigits parses a Content-Length value that is only ASCII digits,
// at most 18 of them (so it cannot overflow int64 and net/http's
// strconv.ParseUint(v, 10, 63) gives the same number). Anything else —
// empty, a sign, inner white space, a comma list, a longer number — reports
// false and goes to net/http.
func parsePlainDigits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// shouldClose is net/http's shouldClose for a request of HTTP/1.minor with
// at most one Connection field (present, with value conn): HTTP/1.1 closes on
// a "close" token, HTTP/1.0 unless there is a "keep-alive" token and no
// "close" token.
func shouldClose(minor int, present bool, conn string) bool {
	hasClose := present && valueContainsToken(conn, "close")
	if minor == 0 {
		return hasClose || !(present && valueContainsToken(conn, "keep-alive"))
	}
	return hasClose
}

// valueContainsToken is httpguts.HeaderValuesContainsToken for one value:
// comma-separated elements, optional white space trimmed, compared without
// regard to ASCII case, non-ASCII never equal.
func valueContainsToken(v, token string) bool {
	for {
		elem, rest, more := cut(v, ',')
		if tokenEqual(trimOWS(elem), token) {
			return true
		}
		if !more {
			return false
		}
		v = rest
	}
}

func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func trimOWS(x string) string {
	for len(x) > 0 && (x[0] == ' ' || x[0] == '\t') {
		x = x[1:]
	}
	for len(x) > 0 && (x[len(x)-1] == ' ' || x[len(x)-1] == '\t') {
		x = x[:len(x)-1]
	}
	return x
}

// tokenEqual reports whether t equals the lower-case ASCII token, ignoring
// ASCII case; a non-ASCII byte never matches.
func tokenEqual(t, token string) bool {
	if len(t) != len(token) {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c >= 0x80 {
			return false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != token[i] {
			return false
		}
	}
	return true
}
