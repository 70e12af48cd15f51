// Package e2e is BotBox's end-to-end suite: it proves containment with real
// packets, on the Pod-in-network-namespaces topology of the spec's e2e.md.
//
// Each test builds its own pair of network namespaces — a "pod" (the app as
// UID 1000, BotBox as UID 1337, the rules installed by the real
// `botbox netfilter install`) and a "net" (the test origin, cmd/e2e-origin,
// over IPv4 and IPv6) — joined by a veth pair, runs the real binaries in them,
// and tears everything down again, also on failure. Namespace names,
// addresses and /etc/netns entries are random per run, so parallel runs do not
// collide. No packet leaves the two namespaces and loopback.
//
// The containment tests run once per netfilter backend (forEachBackend:
// subtests "iptables" and "nftables"); the others use the default, auto.
//
// The tests need root, ip, iptables/ip6tables, nft and setpriv: they skip (with
// the reason) when those are missing, and fail when the CI environment
// variable is set. TestClientCompatibility also needs curl, python3 with
// requests, node and java with keytool on the pod's PATH (.ci/run installs
// them), with the same rule. docs/containment.md maps each threat to the test that proves it.
//
// The package has no non-test code besides this comment; the helper programs
// are cmd/e2e-origin and cmd/e2e-client, sharing their JSON in internal/wire.
// TestGitOverHTTPSWithBasicTemplate also needs git (/usr/bin/git), with the
// same rule.
package e2e
