// Command floor is the benchmark's "Go floor": the plain
// httputil.ReverseProxy anyone would write to do BotBox's job (HTTP in,
// Authorization replaced, HTTPS out over a keep-alive pool with certificate
// verification), with no policy, logging or metrics. BotBox must beat it.
//
//	floor -listen 127.0.0.1:28090 -origin https://127.0.0.1:18443 -ca ca.crt -token T
//
// With -dns ADDR it is also the DNS guard cell's floor: the plain
// miekg/dns UDP server anyone would write, answering every A query with
// one fixed record from memory (no policy, no cache, no copies).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:28090", "listen address")
	origin := flag.String("origin", "https://127.0.0.1:18443", "upstream origin URL")
	caFile := flag.String("ca", "", "PEM roots for the origin")
	token := flag.String("token", "", "bearer token to inject")
	dnsAddr := flag.String("dns", "", "also serve DNS on this UDP address (the DNS cell's floor)")
	flag.Parse()
	if *dnsAddr != "" {
		go serveDNS(*dnsAddr)
	}
	target, err := url.Parse(*origin)
	if err != nil {
		log.Fatal(err)
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	auth := "Bearer " + *token
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Set("Authorization", auth)
		},
		// HTTP/1.1 keep-alive pool (a custom TLS config turns HTTP/2 off).
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: roots},
			MaxIdleConnsPerHost: 256,
		},
		FlushInterval: -1, // stream, as BotBox does
	}
	log.Fatal(http.ListenAndServe(*listen, rp))
}
