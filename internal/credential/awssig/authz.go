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

// CopySourcePath returns the path, on host, of the object an S3 copy
// (CopyObject, UploadPartCopy) reads with the signer's key: the value of
// X-Amz-Copy-Source, "[/]bucket/key[?versionId=...]", as it would be
// requested on host — "/key" on a virtual-hosted bucket host
// (bucket.s3.<region>.amazonaws.com), "/bucket/key" on any other
// (path-style), escapes kept — so that the proxy judges the copy as a GET
// of that path by the rule that allowed the request. ok is false when the
// source cannot be read on host: another bucket than a virtual-hosted
// host's own, an access point or other ARN, no bucket or no key.
func CopySourcePath(host, value string) (path string, ok bool) {
	v := strings.TrimPrefix(value, "/")
	v, _, _ = strings.Cut(v, "?")
	bucket, key, found := strings.Cut(v, "/")
	if !found || bucket == "" || key == "" {
		return "", false
	}
	name, err := url.PathUnescape(bucket)
	if err != nil || name == "" || strings.ContainsAny(name, "/:\\") {
		return "", false
	}
	if own, virtual := virtualBucket(host); virtual {
		if name != own {
			return "", false
		}
		return "/" + key, true
	}
	return "/" + bucket + "/" + key, true
}

// virtualBucket returns the bucket of a virtual-hosted S3 host: the labels
// before its first S3 endpoint label ("s3", "s3-<...>", "s3express") of an
// …amazonaws.com name.
func virtualBucket(host string) (string, bool) {
	h := strings.TrimSuffix(host, ".")
	if !strings.HasSuffix(h, ".amazonaws.com") && !strings.HasSuffix(h, ".amazonaws.com.cn") {
		return "", false
	}
	labels := strings.Split(h, ".")
	for i, l := range labels {
		if l == "s3" || strings.HasPrefix(l, "s3-") || strings.HasPrefix(l, "s3express") {
			if i == 0 {
				return "", false
			}
			return strings.Join(labels[:i], "."), true
		}
	}
	return "", false
}
