package inject

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DefaultRegistry is the registry of an image name without a host, as the
// container runtimes resolve it (docker.io/library/x for "x").
const DefaultRegistry = "docker.io"

// The grammar of github.com/distribution/reference (docker/reference.go),
// written out: the runtimes (containerd's CRI, CRI-O) normalise names with
// it, so the registry found here is the one the node contacts.
var (
	domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	ipv6Host        = `\[(?:[a-fA-F0-9:]+)\]`
	hostRE          = regexp.MustCompile(`^(?:` + domainComponent + `(?:\.` + domainComponent + `)*|` + ipv6Host + `)(?::[0-9]+)?$`)
	pathComponentRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$`)
	tagRE           = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	digestRE        = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$`)
)

// maxImageRef is distribution/reference's NameTotalLengthMax (name part).
const maxImageRef = 255

// ImageRegistry returns the registry host an image reference is pulled
// from, lower-cased: the first path component when it holds a "." or ":",
// is "localhost" or has an upper-case letter (distribution/reference's
// splitDockerDomain), else docker.io; index.docker.io is docker.io. A
// reference the runtime would not parse is an error, so nothing the
// runtime reads differently is ever let through (FuzzImageRegistry).
func ImageRegistry(image string) (string, error) {
	if image == "" {
		return "", errors.New("empty image reference")
	}
	name := image
	if at := strings.IndexByte(name, '@'); at >= 0 {
		if !digestRE.MatchString(name[at+1:]) {
			return "", fmt.Errorf("image %q: invalid digest", image)
		}
		name = name[:at]
	}
	if colon := strings.LastIndexByte(name, ':'); colon > strings.LastIndexByte(name, '/') {
		if !tagRE.MatchString(name[colon+1:]) {
			return "", fmt.Errorf("image %q: invalid tag", image)
		}
		name = name[:colon]
	}
	if name == "" || len(name) > maxImageRef {
		return "", fmt.Errorf("image %q: invalid name", image)
	}
	host := DefaultRegistry
	repo := name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			host, repo = first, name[i+1:]
			if !hostRE.MatchString(host) {
				return "", fmt.Errorf("image %q: invalid registry host %q", image, host)
			}
		}
	}
	for _, c := range strings.Split(repo, "/") {
		if !pathComponentRE.MatchString(c) {
			return "", fmt.Errorf("image %q: invalid repository path component %q", image, c)
		}
	}
	return normRegistry(host), nil
}

// normRegistry lower-cases a registry host and names Docker Hub's aliases
// docker.io.
func normRegistry(host string) string {
	host = strings.ToLower(host)
	if host == "index.docker.io" || host == "registry-1.docker.io" {
		return DefaultRegistry
	}
	return host
}

// validRegistryHost reports whether r is a registry host an allowlist can
// name (host or host:port, no scheme, path or wildcard).
func validRegistryHost(r string) bool {
	return hostRE.MatchString(r)
}

// imageAllowed reports whether the image is BotBox's own or comes from a
// listed registry (any, when the list is empty).
func imageAllowed(image string, o Options) error {
	if image == o.Image {
		return nil
	}
	host, err := ImageRegistry(image)
	if err != nil {
		return err
	}
	if len(o.AllowedImageRegistries) == 0 {
		return nil
	}
	for _, r := range o.AllowedImageRegistries {
		if normRegistry(r) == host {
			return nil
		}
	}
	return fmt.Errorf("image %q is pulled from registry %s, which is not in --allowed-image-registries %v: the node fetches it over its own network, and the name carries what the Pod writes into it", image, host, o.AllowedImageRegistries)
}
