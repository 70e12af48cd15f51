// Package testutil groups helpers imported only by tests: testpki makes CAs
// and leaves inside a test, logcapture collects JSON log lines, wsecho is a
// WebSocket-style upgrade peer (origin handler and client). Nothing in
// the botbox binary may import it (a dependency test enforces this).
package testutil
