package config

import (
	"errors"
	"fmt"
	"strings"
)

// The tokens of a rewrite template with a secret_ref.
const (
	// TemplateValue is replaced by the secret, as is.
	TemplateValue = "{value}"
	// templateBasicOpen starts {basic:USER}: the whole header value
	// becomes "Basic " + base64(USER ":" secret) (RFC 7617).
	templateBasicOpen = "{basic:"
	// maxBasicUser bounds the user of {basic:USER}.
	maxBasicUser = 255
)

// ErrNoValueToken is ParseTemplate's error for a template with neither
// {value} nor {basic:USER}: the secret would never be sent.
var ErrNoValueToken = errors.New("the value has no {value} placeholder, so the secret would never be sent")

// Template is a parsed rewrite value with a secret_ref: either literal
// parts around each {value}, or a Basic credential.
type Template struct {
	// Parts are the literal pieces around each {value} (len = tokens+1);
	// nil for a Basic template.
	Parts []string
	// Basic is true for {basic:USER}; BasicUser is USER (may be empty).
	Basic     bool
	BasicUser string
}

// ParseTemplate parses the value of a rewrite that has a secret_ref. The
// grammar, the whole of it:
//
//   - "{basic:USER}" as the entire value: a Basic credential with USER
//     as the user-id and the secret as the password. USER is 0 to 255
//     visible ASCII characters other than ':', '{' and '}'. Only where
//     basicAllowed (header_rewrites; a query parameter has no scheme).
//   - otherwise a text holding "{value}" at least once, every occurrence
//     replaced by the secret; "{basic:" anywhere else is an error, so a
//     mistyped Basic template never sends its text literally.
//
// Errors never quote the value (a template may hold a credential's
// literal part). FuzzParseTemplate holds that it never panics and that a
// parsed template renders back to the value it came from.
func ParseTemplate(value string, basicAllowed bool) (Template, error) {
	if strings.HasPrefix(value, templateBasicOpen) {
		if !basicAllowed {
			return Template{}, errors.New("{basic:USER} is only valid in header_rewrites")
		}
		if !strings.HasSuffix(value, "}") || strings.Count(value, "}") != 1 {
			return Template{}, errors.New("{basic:USER} must be the whole value, closed by one '}' (write value: \"{basic:x-access-token}\")")
		}
		user := value[len(templateBasicOpen) : len(value)-1]
		if len(user) > maxBasicUser {
			return Template{}, fmt.Errorf("the user of {basic:USER} is longer than %d characters", maxBasicUser)
		}
		for i := 0; i < len(user); i++ {
			if c := user[i]; c <= ' ' || c >= 0x7f || c == ':' || c == '{' {
				return Template{}, fmt.Errorf("the user of {basic:USER} has a character not allowed at offset %d (visible ASCII except ':', '{' and '}')", i)
			}
		}
		return Template{Basic: true, BasicUser: user}, nil
	}
	if strings.Contains(value, templateBasicOpen) {
		return Template{}, errors.New("{basic:USER} must be the whole value, nothing before or after it")
	}
	if !strings.Contains(value, TemplateValue) {
		return Template{}, ErrNoValueToken
	}
	return Template{Parts: strings.Split(value, TemplateValue)}, nil
}

// String renders t back as a template.
func (t Template) String() string {
	if t.Basic {
		return templateBasicOpen + t.BasicUser + "}"
	}
	return strings.Join(t.Parts, TemplateValue)
}
