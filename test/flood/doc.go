// Package flood runs the botbox binary in a memory-limited cgroup (256 MiB,
// the manifest's limit) and floods it the way the red-team report did: more
// than 10,000 idle connections on the admin port and HTTP/2 stream floods on
// the interception listener. It checks that BotBox survives (no OOM kill),
// still serves a fresh client, and that its RSS stays under the limit, and
// it reports the peak RSS (docs/performance.md, "Memory model").
//
// The test re-executes itself in a new network namespace (unshare --net) so
// that its origin on port 443 and its connections never collide with other
// tests on the machine. It needs root, unshare(1), ip(8) and a memory cgroup
// (v1 or v2): it fails when CI is set and one is missing, and skips
// otherwise. Run it with
//
//	go test -v ./test/flood/
package flood
