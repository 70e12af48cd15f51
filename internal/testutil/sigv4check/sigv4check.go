// Package sigv4check verifies, in tests, the SigV4 signature of a request
// as an AWS service receives it: it rebuilds the request from the signed
// headers the Authorization names, the received X-Amz-Date and payload
// hash, signs that with the real keys using the AWS SDK for Go v2's
// signer, and compares the signatures. It also checks the access key, the
// credential scope (date, region, service), the clock skew (AWS allows 5
// minutes) and, when the payload hash is not UNSIGNED-PAYLOAD, that it is
// the SHA-256 of the body received.
//
// It is the "recompute from the received request and compare" check: a
// signature the app made with its placeholder keys, or any header changed
// after signing, fails it. The real S3 verifier is versitygw (test/s3).
package sigv4check

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Verify checks r (as a server received it, body already read into body).
func Verify(r *http.Request, body []byte, creds aws.Credentials, region, service string, now time.Time) error {
	auth := r.Header.Values("Authorization")
	if len(auth) != 1 {
		return fmt.Errorf("want one Authorization header, got %d", len(auth))
	}
	fields, ok := strings.CutPrefix(auth[0], "AWS4-HMAC-SHA256 ")
	if !ok {
		return errors.New("the Authorization header is not AWS4-HMAC-SHA256")
	}
	var cred, signed, sig string
	for part := range strings.SplitSeq(fields, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[0] != creds.AccessKeyID || scope[2] != region || scope[3] != service || scope[4] != "aws4_request" {
		return fmt.Errorf("credential scope %q: want key %s, region %s, service %s", cred, "(the real key)", region, service)
	}
	date, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("X-Amz-Date: %w", err)
	}
	if scope[1] != date.Format("20060102") {
		return fmt.Errorf("scope date %s differs from X-Amz-Date", scope[1])
	}
	if d := now.Sub(date); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("X-Amz-Date %v is %v away from now", date, d)
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	} else if hash != "UNSIGNED-PAYLOAD" && hash != "STREAMING-UNSIGNED-PAYLOAD-TRAILER" {
		sum := sha256.Sum256(body)
		if hash != hex.EncodeToString(sum[:]) {
			return fmt.Errorf("X-Amz-Content-Sha256 is not the SHA-256 of the %d body bytes received", len(body))
		}
	}
	if creds.SessionToken != "" && r.Header.Get("X-Amz-Security-Token") != creds.SessionToken {
		return fmt.Errorf("X-Amz-Security-Token is not the real session token")
	}
	u := &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	re, err := http.NewRequest(r.Method, u.String(), nil)
	if err != nil {
		return err
	}
	re.Host = r.Host
	re.ContentLength = r.ContentLength
	for _, h := range strings.Split(signed, ";") {
		switch h {
		case "host":
			continue
		case "content-length":
			continue // from ContentLength
		}
		re.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
	}
	s := v4.NewSigner()
	err = s.SignHTTP(context.Background(), creds, re, hash, service, region, date, func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = service == "s3"
	})
	if err != nil {
		return err
	}
	want := re.Header.Get("Authorization")
	if !strings.HasSuffix(want, "Signature="+sig) {
		return fmt.Errorf("signature mismatch: recomputed %q for the received request, got signature %s", want, sig)
	}
	return nil
}
