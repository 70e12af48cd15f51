package config

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/botbox/botbox/internal/secretref"
)

// The credential types of credentials.<name>.type.
const (
	// CredentialAWSSigV4 re-signs the app's AWS requests (SigV4) with the
	// real keys (package credential/awssig).
	CredentialAWSSigV4 = "aws_sigv4"
	// CredentialGitHubApp mints installation tokens of a GitHub App,
	// narrowed to repositories and permissions (package credential/token).
	CredentialGitHubApp = "github_app"
	// CredentialOAuth2ClientCredentials mints OAuth 2.0 client-credentials
	// tokens (RFC 6749 §4.4).
	CredentialOAuth2ClientCredentials = "oauth2_client_credentials"
	// CredentialGoogleServiceAccount mints Google access tokens from a
	// service account's JSON key.
	CredentialGoogleServiceAccount = "google_service_account"
)

// DefaultGitHubAPIURL is github_app's api_url when omitted.
const DefaultGitHubAPIURL = "https://api.github.com"

// Credential is one entry of credentials: a credential BotBox holds and
// applies to the requests of the rules that name it (credential:), never
// handed to the app. Only the fields of its Type are set.
type Credential struct {
	// Name is the key under credentials.
	Name string
	// Type is one of the Credential* constants.
	Type string
	// Line is the line of the entry in the config file (0 if unknown).
	Line int

	// aws_sigv4: the key pair (and optional session token) as secret refs;
	// Region is required, Service is inferred from the rule's host when ""
	// (AWSService).
	AccessKeyIDRef, SecretAccessKeyRef, SessionTokenRef string
	Region, Service                                     string

	// github_app.
	AppID, InstallationID int64
	PrivateKeyRef         string
	// Repositories are the repository names the token is limited to (the
	// part after "owner/" when written so); nil: every repository of the
	// installation.
	Repositories []string
	// Permissions are the permissions requested (name -> read, write or
	// admin); nil: the installation's.
	Permissions map[string]string
	// APIURL is the GitHub REST API base URL (https, no trailing slash).
	APIURL string

	// oauth2_client_credentials.
	TokenURL                     string
	ClientIDRef, ClientSecretRef string
	// Scopes of oauth2_client_credentials and google_service_account.
	Scopes []string

	// google_service_account: the service account's JSON key.
	KeyRef string
}

// SecretRefs are the secret files the credential reads, sorted.
func (c *Credential) SecretRefs() []string {
	var refs []string
	for _, r := range []string{c.AccessKeyIDRef, c.SecretAccessKeyRef, c.SessionTokenRef, c.PrivateKeyRef, c.ClientIDRef, c.ClientSecretRef, c.KeyRef} {
		if r != "" {
			refs = append(refs, r)
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// Minted reports whether the credential is a token BotBox mints (every
// type but aws_sigv4).
func (c *Credential) Minted() bool { return c.Type != CredentialAWSSigV4 }

// Credential returns the credential named name, or nil.
func (c *Config) Credential(name string) *Credential {
	i, ok := slices.BinarySearchFunc(c.Credentials, name, func(e Credential, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	return &c.Credentials[i]
}

// ReadySecretRefs are the secret files readiness waits for: every
// secret_ref of the rules and every credential's refs.
func (c *Config) ReadySecretRefs() []string {
	refs := append(c.RequiredSecretRefs(), c.CredentialSecretRefs()...)
	slices.Sort(refs)
	return slices.Compact(refs)
}

// SameCredential reports whether a and b configure the same credential
// (where they are written aside).
func SameCredential(a, b Credential) bool {
	return a.Name == b.Name && a.Type == b.Type &&
		a.AccessKeyIDRef == b.AccessKeyIDRef && a.SecretAccessKeyRef == b.SecretAccessKeyRef && a.SessionTokenRef == b.SessionTokenRef &&
		a.Region == b.Region && a.Service == b.Service &&
		a.AppID == b.AppID && a.InstallationID == b.InstallationID && a.PrivateKeyRef == b.PrivateKeyRef &&
		slices.Equal(a.Repositories, b.Repositories) && maps.Equal(a.Permissions, b.Permissions) && a.APIURL == b.APIURL &&
		a.TokenURL == b.TokenURL && a.ClientIDRef == b.ClientIDRef && a.ClientSecretRef == b.ClientSecretRef &&
		slices.Equal(a.Scopes, b.Scopes) && a.KeyRef == b.KeyRef
}

// CredentialSecretRefs returns the secret refs of every credential,
// sorted and without duplicates: the proxy is ready only when they exist.
func (c *Config) CredentialSecretRefs() []string {
	var refs []string
	for i := range c.Credentials {
		refs = append(refs, c.Credentials[i].SecretRefs()...)
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// PlaceholderRefs are the secret refs that get placeholders: every
// secret_ref of the rules (RequiredSecretRefs) and the key pair and
// session token of every aws_sigv4 credential (the app signs with their
// placeholders). The keys of minted tokens get none: the app never needs
// them, so any shape of them in a request is a plain leak.
func (c *Config) PlaceholderRefs() []string {
	refs := c.RequiredSecretRefs()
	for i := range c.Credentials {
		if cr := &c.Credentials[i]; cr.Type == CredentialAWSSigV4 {
			refs = append(refs, cr.AccessKeyIDRef, cr.SecretAccessKeyRef)
			if cr.SessionTokenRef != "" {
				refs = append(refs, cr.SessionTokenRef)
			}
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// PlaceholderAliases maps the AWS SDKs' environment variable names
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) to the
// secret refs whose placeholders they carry in the env file, when exactly
// one aws_sigv4 credential is configured (with two, which one the SDK
// should sign with is the app's choice: it reads the per-ref names). Nil
// otherwise.
func (c *Config) PlaceholderAliases() map[string]string {
	var aws *Credential
	for i := range c.Credentials {
		if c.Credentials[i].Type == CredentialAWSSigV4 {
			if aws != nil {
				return nil
			}
			aws = &c.Credentials[i]
		}
	}
	if aws == nil {
		return nil
	}
	m := map[string]string{"AWS_ACCESS_KEY_ID": aws.AccessKeyIDRef, "AWS_SECRET_ACCESS_KEY": aws.SecretAccessKeyRef}
	if aws.SessionTokenRef != "" {
		m["AWS_SESSION_TOKEN"] = aws.SessionTokenRef
	}
	return m
}

// AWSService is the SigV4 signing name of host: service when set, else
// inferred from an AWS endpoint name (…amazonaws.com): "s3" for any S3
// endpoint (virtual-hosted buckets, s3.<region>, s3-<...>), "bedrock" for
// the Bedrock endpoints (bedrock-runtime, bedrock-agent-runtime), else the
// endpoint's first label after a bucket ("sts", "dynamodb"). ok is false
// when host is not an AWS endpoint and service is "".
func AWSService(service, host string) (string, bool) {
	if service != "" {
		return service, true
	}
	h := strings.TrimSuffix(host, ".")
	if !strings.HasSuffix(h, ".amazonaws.com") && !strings.HasSuffix(h, ".amazonaws.com.cn") {
		return "", false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "s3" || strings.HasPrefix(l, "s3-") || l == "s3express" {
			return "s3", true
		}
	}
	if strings.HasPrefix(labels[0], "bedrock") {
		return "bedrock", true
	}
	if len(labels) < 3 || labels[0] == "" || labels[0] == "*" {
		return "", false
	}
	return labels[0], true
}

var (
	credentialNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	awsRegionRe      = regexp.MustCompile(`^[a-z]{2}(-[a-z0-9]+){1,4}$`)
	awsServiceRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	permissionNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	repoNameRe       = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9-]{0,38}/)?[A-Za-z0-9._-]{1,100}$`)
)

// credentialKeys lists, per type, the keys an entry of that type may have
// besides type (the others are refused: a github_app with a region is a
// mistake, never silently ignored).
var credentialKeys = map[string][]string{
	CredentialAWSSigV4:                {"access_key_id_ref", "secret_access_key_ref", "session_token_ref", "region", "service"},
	CredentialGitHubApp:               {"app_id", "private_key_ref", "installation_id", "repositories", "permissions", "api_url"},
	CredentialOAuth2ClientCredentials: {"token_url", "client_id_ref", "client_secret_ref", "scopes"},
	CredentialGoogleServiceAccount:    {"key_ref", "scopes"},
}

// presentCredentialKeys lists the keys written in w, in the order of
// wireCredential.
func presentCredentialKeys(w wireCredential) []string {
	var out []string
	add := func(set bool, k string) {
		if set {
			out = append(out, k)
		}
	}
	add(w.AccessKeyIDRef != nil, "access_key_id_ref")
	add(w.SecretAccessKeyRef != nil, "secret_access_key_ref")
	add(w.SessionTokenRef != nil, "session_token_ref")
	add(w.Region != nil, "region")
	add(w.Service != nil, "service")
	add(w.AppID != nil, "app_id")
	add(w.PrivateKeyRef != nil, "private_key_ref")
	add(w.InstallationID != nil, "installation_id")
	add(w.Repositories != nil, "repositories")
	add(w.Permissions != nil, "permissions")
	add(w.APIURL != nil, "api_url")
	add(w.TokenURL != nil, "token_url")
	add(w.ClientIDRef != nil, "client_id_ref")
	add(w.ClientSecretRef != nil, "client_secret_ref")
	add(w.Scopes != nil, "scopes")
	add(w.KeyRef != nil, "key_ref")
	return out
}

// credentials validates the credentials block into a list sorted by name.
func (c *checker) credentials(ws map[string]wireCredential) []Credential {
	out := []Credential{}
	for _, name := range slices.Sorted(mapKeys(ws)) {
		path := "credentials." + name
		if !credentialNameRe.MatchString(name) {
			c.errorf(path, "credential name '%s' must be 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit", clip(name))
			continue
		}
		if cr, ok := c.credential(path, name, ws[name]); ok {
			out = append(out, cr)
		}
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// credential validates one entry; ok is false when it is unusable.
func (c *checker) credential(path, name string, w wireCredential) (Credential, bool) {
	cr := Credential{Name: name, Line: c.idx.line(path)}
	if w.Type == nil {
		c.errorf(path+".type", "required key is missing (%s, %s, %s or %s)", CredentialAWSSigV4, CredentialGitHubApp, CredentialOAuth2ClientCredentials, CredentialGoogleServiceAccount)
		return cr, false
	}
	cr.Type = *w.Type
	allowed, known := credentialKeys[cr.Type]
	if !known {
		c.errorf(path+".type", "unknown credential type '%s' (want %s, %s, %s or %s)", clip(cr.Type), CredentialAWSSigV4, CredentialGitHubApp, CredentialOAuth2ClientCredentials, CredentialGoogleServiceAccount)
		return cr, false
	}
	ok := true
	for _, k := range presentCredentialKeys(w) {
		if !slices.Contains(allowed, k) {
			c.errorf(path+"."+k, "does not apply to a credential of type %s (its keys: %s)", cr.Type, strings.Join(allowed, ", "))
			ok = false
		}
	}
	ref := func(key string, v *string, required bool) string {
		if v == nil {
			if required {
				c.errorf(path+"."+key, "required key is missing (a secret file name in secrets_dir)")
				ok = false
			}
			return ""
		}
		if !secretref.Valid(*v) {
			c.errorf(path+"."+key, "'%s' must be %s", clip(*v), secretref.Rule)
			ok = false
			return ""
		}
		return *v
	}
	switch cr.Type {
	case CredentialAWSSigV4:
		cr.AccessKeyIDRef = ref("access_key_id_ref", w.AccessKeyIDRef, true)
		cr.SecretAccessKeyRef = ref("secret_access_key_ref", w.SecretAccessKeyRef, true)
		cr.SessionTokenRef = ref("session_token_ref", w.SessionTokenRef, false)
		if cr.AccessKeyIDRef != "" && cr.AccessKeyIDRef == cr.SecretAccessKeyRef {
			c.errorf(path+".secret_access_key_ref", "must differ from access_key_id_ref")
			ok = false
		}
		switch {
		case w.Region == nil:
			c.errorf(path+".region", "required key is missing (e.g. us-east-1)")
			ok = false
		case !awsRegionRe.MatchString(*w.Region):
			c.errorf(path+".region", "'%s' is not an AWS region name (e.g. us-east-1)", clip(*w.Region))
			ok = false
		default:
			cr.Region = *w.Region
		}
		if w.Service != nil {
			if !awsServiceRe.MatchString(*w.Service) {
				c.errorf(path+".service", "'%s' is not a SigV4 service name (lower-case letters, digits and '-', e.g. s3, bedrock)", clip(*w.Service))
				ok = false
			} else {
				cr.Service = *w.Service
			}
		}
	case CredentialGitHubApp:
		cr.AppID = c.positiveID(path+".app_id", w.AppID, &ok)
		cr.InstallationID = c.positiveID(path+".installation_id", w.InstallationID, &ok)
		cr.PrivateKeyRef = ref("private_key_ref", w.PrivateKeyRef, true)
		if w.Repositories != nil || c.isEmptyList(path+".repositories") {
			if len(w.Repositories) == 0 {
				c.errorf(path+".repositories", "cannot be empty (omit the key for every repository of the installation)")
				ok = false
			}
			seen := map[string]bool{}
			for i, r := range w.Repositories {
				if !repoNameRe.MatchString(r) {
					c.errorf(fmt.Sprintf("%s.repositories[%d]", path, i), "'%s' is not a repository name (name or owner/name)", clip(r))
					ok = false
					continue
				}
				_, n, found := strings.Cut(r, "/")
				if !found {
					n = r
				}
				if !seen[n] {
					seen[n] = true
					cr.Repositories = append(cr.Repositories, n)
				}
			}
		}
		if w.Permissions != nil || c.isEmptyMap(path+".permissions") {
			if len(w.Permissions) == 0 {
				c.errorf(path+".permissions", "cannot be empty (omit the key for the installation's permissions)")
				ok = false
			}
			cr.Permissions = map[string]string{}
			for _, k := range slices.Sorted(mapKeys(w.Permissions)) {
				v := w.Permissions[k]
				switch {
				case !permissionNameRe.MatchString(k):
					c.errorf(path+".permissions."+k, "'%s' is not a permission name (e.g. contents, pull_requests)", clip(k))
					ok = false
				case v != "read" && v != "write" && v != "admin":
					c.errorf(path+".permissions."+k, "must be read, write or admin, got '%s'", clip(v))
					ok = false
				default:
					cr.Permissions[k] = v
				}
			}
		}
		cr.APIURL = DefaultGitHubAPIURL
		if w.APIURL != nil {
			if u, good := c.httpsURL(path+".api_url", *w.APIURL, false); good {
				cr.APIURL = strings.TrimSuffix(u, "/")
			} else {
				ok = false
			}
		}
	case CredentialOAuth2ClientCredentials:
		if w.TokenURL == nil {
			c.errorf(path+".token_url", "required key is missing (the authorization server's token endpoint, https)")
			ok = false
		} else if u, good := c.httpsURL(path+".token_url", *w.TokenURL, true); good {
			cr.TokenURL = u
		} else {
			ok = false
		}
		cr.ClientIDRef = ref("client_id_ref", w.ClientIDRef, true)
		cr.ClientSecretRef = ref("client_secret_ref", w.ClientSecretRef, true)
		cr.Scopes = c.scopes(path+".scopes", w.Scopes, false, &ok)
	case CredentialGoogleServiceAccount:
		cr.KeyRef = ref("key_ref", w.KeyRef, true)
		cr.Scopes = c.scopes(path+".scopes", w.Scopes, true, &ok)
	}
	return cr, ok
}

func (c *checker) positiveID(path string, v *int64, ok *bool) int64 {
	switch {
	case v == nil:
		c.errorf(path, "required key is missing (a positive integer)")
	case *v <= 0:
		c.errorf(path, "must be a positive integer, got %d", *v)
	default:
		return *v
	}
	*ok = false
	return 0
}

// httpsURL checks an absolute https URL without userinfo or fragment (and
// without a query unless query). Token endpoints are dialled by BotBox
// with verified TLS only.
func (c *checker) httpsURL(path, raw string, query bool) (string, bool) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		c.errorf(path, "'%s' is not a URL", clip(raw))
	case u.Scheme != "https":
		c.errorf(path, "'%s' must be an https URL (BotBox sends credentials to it)", clip(raw))
	case u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "":
		c.errorf(path, "'%s' must be https://host[:port]/path, without userinfo or fragment", clip(raw))
	case !query && u.RawQuery != "":
		c.errorf(path, "'%s' must not have a query", clip(raw))
	default:
		return u.String(), true
	}
	return "", false
}

func (c *checker) scopes(path string, ws []string, required bool, ok *bool) []string {
	if ws == nil && !c.isEmptyList(path) {
		if required {
			c.errorf(path, "required key is missing (e.g. [https://www.googleapis.com/auth/cloud-platform])")
			*ok = false
		}
		return nil
	}
	if len(ws) == 0 {
		c.errorf(path, "cannot be empty (omit the key for the server's default scopes)")
		*ok = false
	}
	for i, s := range ws {
		// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
		good := s != ""
		for j := 0; j < len(s) && good; j++ {
			b := s[j]
			good = b == 0x21 || b >= 0x23 && b <= 0x5b || b >= 0x5d && b <= 0x7e
		}
		if !good {
			c.errorf(fmt.Sprintf("%s[%d]", path, i), "'%s' is not a scope (printable ASCII without space, '\"' or '\\\\')", clip(s))
			*ok = false
		}
	}
	return slices.Clone(ws)
}

// isEmptyMap reports whether path is present as an explicit empty mapping.
func (c *checker) isEmptyMap(path string) bool {
	n := c.idx.values[path]
	return n != nil && n.ShortTag() == "!!map" && len(n.Content) == 0
}

// ruleCredential validates a rule's credential: a name of the credentials
// block, only on an allow rule, never with header_rewrites or
// query_rewrites (the credential owns the request's authentication), and
// for aws_sigv4 a host whose signing service is known.
func (c *checker) ruleCredential(path, label string, r *Rule, w wireRule) {
	if w.Credential == nil {
		return
	}
	name := *w.Credential
	cr := c.creds[name]
	switch {
	case r.Action == ActionDeny:
		c.errorf(path+".credential", "credential applies only to an allow rule (this rule denies every request)")
		return
	case len(w.HeaderRewrites) > 0 || len(w.QueryRewrites) > 0:
		c.errorf(path+".credential", "a rule has credential or header_rewrites/query_rewrites, not both (host '%s'): the credential owns the request's authentication", label)
		return
	case cr == nil:
		c.errorf(path+".credential", "unknown credential '%s' (define it under credentials)", clip(name))
		return
	}
	if cr.Type == CredentialAWSSigV4 {
		if _, ok := AWSService(cr.Service, r.Host); !ok {
			c.errorf(path+".credential", "credential '%s' cannot infer the SigV4 service from host '%s' (not an …amazonaws.com endpoint); set service on the credential", name, label)
			return
		}
	}
	r.Credential = name
	c.usedCreds[name] = true
}

// credentialWarnings warns about credentials no rule uses.
func (c *checker) credentialWarnings(creds []Credential) {
	for i := range creds {
		if !c.usedCreds[creds[i].Name] {
			c.warn("credentials."+creds[i].Name, "credential '"+creds[i].Name+"' is not used by any rule")
		}
	}
}
