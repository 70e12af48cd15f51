package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// signV4 signs req as an AWS SDK does, with the keys of the environment
// (the app's: BotBox's placeholders), for spec "SERVICE/REGION".
func signV4(req *http.Request, spec string, body []byte) error {
	service, region, ok := strings.Cut(spec, "/")
	if !ok {
		return fmt.Errorf("-sigv4 %q: want SERVICE/REGION", spec)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds := aws.Credentials{AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}
	return v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, service, region, time.Now())
}
