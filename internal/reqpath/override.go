package reqpath

import (
	"net/url"
	"strings"
)

// overrideHeaders are the request headers with which some origin framework
// replaces the request's method or path (compared lower-case, with '_'
// read as '-', since CGI, WSGI and PHP map both to '_'):
// X-HTTP-Method-Override (Google APIs, Express method-override, Symfony),
// X-HTTP-Method (OData, Microsoft), X-Method-Override (Rack and others),
// X-Original-Method, and X-Original-URL / X-Rewrite-URL (IIS, older
// Symfony), which replace the path.
var overrideHeaders = [...]string{
	"x-http-method-override",
	"x-http-method",
	"x-method-override",
	"x-original-method",
	"x-original-url",
	"x-rewrite-url",
}

// overrideParam is the query parameter with which Rails (Rack
// MethodOverride), Laravel, Symfony and Express replace the method.
const overrideParam = "_method"

// Override returns the name of the first method or path override the
// request carries, "" when it carries none: a header of overrideHeaders in
// any case, with '_' for '-' ("X_HTTP_METHOD_OVERRIDE"), or a query
// parameter named "_method" in any case and escaping ("%5Fmethod",
// "_METHOD", PHP's ".method"), the query split at '&' and at ';' (which some servers also
// treat as a separator). A rule with routes refuses such a request, since
// the origin may then run a method or path the routes never judged
// (package policy, ReasonMethodOverride). header is an http.Header;
// rawQuery is url.URL.RawQuery.
func Override(header map[string][]string, rawQuery string) string {
	found := ""
	eachOverride(header, rawQuery, func(name, _ string) bool {
		found = name
		return false
	})
	return found
}

// OverridesTo reports whether a method or path override the request
// carries (Override's headers and "_method" parameter, in every spelling
// Override finds) has a value for which match is true: the method an
// origin obeying it would run. A value that does not unescape is passed
// as written.
func OverridesTo(header map[string][]string, rawQuery string, match func(value string) bool) bool {
	hit := false
	eachOverride(header, rawQuery, func(_, value string) bool {
		hit = match(value)
		return !hit
	})
	return hit
}

// eachOverride calls yield with the name (an overrideHeaders entry or
// overrideParam) and one value of every override the request carries,
// headers first, until yield returns false.
func eachOverride(header map[string][]string, rawQuery string, yield func(name, value string) bool) {
	for name, values := range header {
		if len(name) < len("x-http-method") || name[0] != 'x' && name[0] != 'X' {
			continue
		}
		for _, o := range overrideHeaders {
			if !headerNameIs(name, o) {
				continue
			}
			if len(values) == 0 && !yield(o, "") {
				return
			}
			for _, v := range values {
				if !yield(o, v) {
					return
				}
			}
		}
	}
	for rawQuery != "" {
		var kv string
		if i := strings.IndexAny(rawQuery, "&;"); i >= 0 {
			kv, rawQuery = rawQuery[:i], rawQuery[i+1:]
		} else {
			kv, rawQuery = rawQuery, ""
		}
		key, value, _ := strings.Cut(kv, "=")
		if dec, err := url.QueryUnescape(key); err == nil {
			key = dec
		}
		if !paramNameIs(key, overrideParam) {
			continue
		}
		if dec, err := url.QueryUnescape(value); err == nil {
			value = dec
		}
		if !yield(overrideParam, value) {
			return
		}
	}
}

// paramNameIs compares a decoded query parameter name with the lower-case
// name want as PHP reads it: leading spaces dropped, ' ', '.' and '[' read
// as '_' (" method" and ".method" are "_method" to PHP), ASCII case
// ignored.
func paramNameIs(name, want string) bool {
	name = strings.TrimLeft(name, " ")
	if len(name) != len(want) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == ' ' || c == '.' || c == '[':
			c = '_'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// headerNameIs compares a header name with the lower-case name want,
// ignoring ASCII case and reading '_' as '-'.
func headerNameIs(name, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}
