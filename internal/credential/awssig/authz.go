package awssig

import (
	"net/url"
	"strings"
)

// algorithm is the only SigV4 scheme an app may sign with (SigV4a's
// AWS4-ECDSA-P256-SHA256 is refused: BotBox re-signs with SigV4).
const algorithm = "AWS4-HMAC-SHA256"

// ParseAuthorization returns the access key ID of a SigV4 Authorization
// value, "AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=..., Signature=...": the scheme exactly, then exactly one
// each of Credential, SignedHeaders and Signature (comma-separated, spaces
// around them ignored), Credential's scope of five '/'-separated non-empty
// parts. ok is false for anything else. It judges the form only: whether
// the key is acceptable is the caller's question, and the signature is
// never checked (the app's placeholder secret is no secret).
func ParseAuthorization(v string) (accessKeyID string, ok bool) {
	rest, found := strings.CutPrefix(v, algorithm)
	if !found || rest == "" || rest[0] != ' ' {
		return "", false
	}
	var cred string
	var seenCred, seenHeaders, seenSig bool
	for part := range strings.SplitSeq(rest, ",") {
		k, val, found := strings.Cut(strings.Trim(part, " "), "=")
		if !found || val == "" {
			return "", false
		}
		switch k {
		case "Credential":
			if seenCred {
				return "", false
			}
			seenCred, cred = true, val
		case "SignedHeaders":
			if seenHeaders {
				return "", false
			}
			seenHeaders = true
		case "Signature":
			if seenSig {
				return "", false
			}
			seenSig = true
		default:
			return "", false
		}
	}
	if !seenCred || !seenHeaders || !seenSig {
		return "", false
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return "", false
	}
	for _, p := range scope {
		if p == "" {
			return "", false
		}
	}
	return scope[0], true
}

// unescape is the query unescaping of a parameter name.
func unescape(s string) (string, error) { return url.QueryUnescape(s) }
