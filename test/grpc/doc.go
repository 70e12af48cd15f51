// Package grpctest runs a real grpc-go client and server through BotBox:
// unary, server-streaming and bidirectional calls, a bidi stream the server
// ends first (with OK and with an error status) while the client's side is
// still open, and client cancellation, through the interception listener of
// a full Server, through its plain listener in plaintext (HTTP/2 with prior
// knowledge) and through the plain pipeline served over TLS with HTTP/2.
//
// It is a module of its own so that grpc-go stays out of the product's
// go.mod and go.sum; no protobuf code is generated (a byte codec and a
// hand-written service description stand in).
package grpctest
