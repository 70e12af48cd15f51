package mitm

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkIssueLeaf is one leaf issuance (key generation + signature) per
// CA key type; it is what a cache miss costs inside a handshake.
func BenchmarkIssueLeaf(b *testing.B) {
	for _, alg := range []string{"p256", "p384", "rsa2048", "ed25519"} {
		b.Run(alg, func(b *testing.B) {
			key := genKey(b, alg)
			ca := caFromPEM(b, selfSign(b, caTemplate(time.Now()), key), keyPEM(b, key, "pkcs8"))
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ca.issue("api.openai.com", 24*time.Hour, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCachedLookup is CertificateFor on a warm cache: SNI validation,
// the LRU and the observer calls.
func BenchmarkCachedLookup(b *testing.B) {
	ic := newInterceptor(b, Options{CA: newTestCA(b), CacheTTL: time.Hour})
	mustCert(b, ic, "api.openai.com")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ic.CertificateFor("api.openai.com"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandshakeCachedLeaf is a full TLS 1.3 handshake (no resumption)
// over net.Pipe whose leaf comes from the cache.
func BenchmarkHandshakeCachedLeaf(b *testing.B) {
	ca := newTestCA(b)
	ic := newInterceptor(b, Options{CA: ca, CacheTTL: time.Hour})
	mustCert(b, ic, "api.openai.com")
	serverCfg := ic.TLSConfig()
	clientCfg := clientConfig(ca, "api.openai.com")
	errc := make(chan error, 1)
	b.ReportAllocs()
	for b.Loop() {
		cc, sc := net.Pipe()
		go func() {
			srv := tls.Server(sc, serverCfg)
			err := srv.Handshake()
			if err == nil {
				_, err = srv.Write([]byte{'x'}) // flushes tickets to the client
			}
			// Close the pipe, not the tls.Conn: a close_notify would block
			// on the unbuffered pipe until its 5 s timeout.
			_ = sc.Close()
			errc <- err
		}()
		cli := tls.Client(cc, clientCfg)
		if err := cli.Handshake(); err != nil {
			b.Fatal(err)
		}
		var one [1]byte
		if _, err := io.ReadFull(cli, one[:]); err != nil {
			b.Fatal(err)
		}
		_ = cc.Close()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}
