// Package listener holds the net.Listener wrappers that sit between a bound
// socket and an http.Server: the shared connection budget of the proxy
// listeners (ConnLimit), the small evicting budget of the admin port
// (IdlePool), TLS termination for the interception listener (TLSListener),
// and the hook that sees the error responses net/http writes before any
// handler runs (ObserveEarlyErrors).
//
// Guarantees, each held by a test in this package:
//   - a temporary Accept error (EMFILE, ENFILE, ECONNABORTED, ...) never
//     closes a listener: TLSListener backs off from 5 ms to 1 s and keeps
//     accepting (TestTLSListenerSurvivesEMFILE); only net.ErrClosed or a
//     permanent error ends it, and then Accept returns that error so that
//     http.Server.Serve returns it;
//   - every connection a ConnLimit accepted can be closed by CloseAll, even
//     after http.Server has hijacked it (TestConnLimitCloseAllHijacked);
//   - drops are counted through a callback and logged at most once per
//     second per listener, with the count of suppressed drops.
//
// The package does not serve HTTP, bind sockets or read configuration:
// package server composes these wrappers and owns their lifetimes.
package listener
