package main

import (
	"strings"
	"testing"
)

const explainCredentialYAML = `
credentials:
  bedrock:
    type: aws_sigv4
    access_key_id_ref: aws-key-id
    secret_access_key_ref: aws-secret
    region: us-east-1
`

// TestExplainCredential: explain names a rule's credential, its type and
// refs, never a value; a missing key file fails as the real request does.
func TestExplainCredential(t *testing.T) {
	t.Parallel()
	rule := "    - host: bedrock-runtime.us-east-1.amazonaws.com\n      action: allow\n      credential: bedrock\n"
	dir := secretsWith(t, map[string]string{"aws-key-id": "AKIAEXPLAINKEY000001", "aws-secret": "explain-secret-never-printed", "openai-api-key": "sk-x", "anthropic-api-key": "sk-y"})
	p := writeFile(t, t.TempDir(), "config.yaml", "secrets_dir: "+dir+"\n"+explainCredentialYAML+"egress_policy:\n  rules:\n"+rule)
	code, out, errOut := runArgs(t, nil, "explain", "-c", p, "--method", "POST", "http://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse")
	if code != 0 || !strings.Contains(out, "credential: bedrock (aws_sigv4)") || !strings.Contains(out, "aws-key-id, aws-secret") || !strings.Contains(out, "service bedrock") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "AKIAEXPLAINKEY000001") || strings.Contains(out, "explain-secret-never-printed") {
		t.Fatalf("explain printed a key:\n%s", out)
	}
	missing := writeFile(t, t.TempDir(), "config.yaml", "secrets_dir: "+t.TempDir()+"\n"+explainCredentialYAML+"egress_policy:\n  rules:\n"+rule)
	code, out, _ = runArgs(t, nil, "explain", "-c", missing, "http://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse")
	if code != 1 || !strings.Contains(out, "status:   500") || !strings.Contains(out, `secret:   "aws-key-id" of credential bedrock: no file`) || strings.Contains(out, "upstream:") {
		t.Fatalf("missing key files: exit %d:\n%s", code, out)
	}
}
