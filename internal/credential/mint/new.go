package mint

import (
	"fmt"
	"net/http"
	"time"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/credential"
)

// NewMinter returns the Minter of a minted credential c.
func NewMinter(c config.Credential, client *http.Client, secrets func() credential.Lookup, now func() time.Time) (Minter, error) {
	if client == nil || secrets == nil {
		return nil, errNoClient
	}
	if now == nil {
		now = time.Now
	}
	switch c.Type {
	case config.CredentialGitHubApp:
		return &GitHubApp{Name: c.Name, AppID: c.AppID, InstallationID: c.InstallationID, PrivateKeyRef: c.PrivateKeyRef,
			Repositories: c.Repositories, Permissions: c.Permissions, APIURL: c.APIURL, Client: client, Secrets: secrets, Now: now}, nil
	case config.CredentialOAuth2ClientCredentials:
		return &ClientCredentials{Name: c.Name, TokenURL: c.TokenURL, ClientIDRef: c.ClientIDRef, ClientSecretRef: c.ClientSecretRef,
			Scopes: c.Scopes, Client: client, Secrets: secrets, Now: now}, nil
	case config.CredentialGoogleServiceAccount:
		return &GoogleServiceAccount{Name: c.Name, KeyRef: c.KeyRef, Scopes: c.Scopes, Client: client, Secrets: secrets, Now: now}, nil
	}
	return nil, fmt.Errorf("credential type %q is not minted", c.Type)
}
