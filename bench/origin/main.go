// Command origin is the benchmark's HTTPS origin: TLS 1.3 only, HTTP/2 and
// HTTP/1.1, a small JSON endpoint (/small, GET or POST; a request body is
// read in full) and a streamed endpoint (/stream, 256 MiB by default,
// ?mib=N to change it).
//
// Every request must carry exactly one "Authorization: Bearer <token>"
// header with the expected token, or it is answered 401: a proxy that fails
// to replace the client's credential, or adds a second one, cannot score.
//
//	origin -listen 127.0.0.1:18443,127.0.0.1:443 -cert origin.crt -key origin.key -token T
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// smallBody is the JSON answer of /small, about the size of a short API reply.
const smallBody = `{"id":"bench-0001","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}` + "\n"

func main() {
	listen := flag.String("listen", "127.0.0.1:18443", "comma-separated listen addresses")
	certFile := flag.String("cert", "", "PEM certificate")
	keyFile := flag.String("key", "", "PEM private key")
	token := flag.String("token", "", "expected bearer token")
	sigv4Key := flag.String("sigv4-key-id", "", "also accept a SigV4 Authorization made with this access key ID (the benchmark's aws_sigv4 variant; the signature is not checked)")
	flag.Parse()
	if *certFile == "" || *keyFile == "" || *token == "" {
		log.Fatal("origin: -cert, -key and -token are required")
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatal(err)
	}
	want := "Bearer " + *token
	var ok, rejected atomic.Int64
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'a' + byte(i%26)
	}
	small := []byte(smallBody)
	smallLen := strconv.Itoa(len(small))

	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header["Authorization"]; len(v) != 1 || v[0] != want && (*sigv4Key == "" || !strings.HasPrefix(v[0], "AWS4-HMAC-SHA256 Credential="+*sigv4Key+"/")) {
			rejected.Add(1)
			http.Error(w, "missing or wrong credential", http.StatusUnauthorized)
			return
		}
		ok.Add(1)
		switch r.URL.Path {
		case "/small":
			// A POST body (an agent's JSON request) is read in full first.
			_, _ = io.Copy(io.Discard, r.Body)
			hd := w.Header()
			hd["Content-Type"] = []string{"application/json"}
			hd["Content-Length"] = []string{smallLen}
			_, _ = w.Write(small)
		case "/stream":
			mib := 256
			if s := r.URL.Query().Get("mib"); s != "" {
				if mib, err = strconv.Atoi(s); err != nil || mib < 1 || mib > 4096 {
					http.Error(w, "bad mib", http.StatusBadRequest)
					return
				}
			}
			total := int64(mib) << 20
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(total, 10))
			for sent := int64(0); sent < total; sent += int64(len(chunk)) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		default:
			http.NotFound(w, r)
		}
	})
	srv := &http.Server{
		Handler:   h,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}},
		ErrorLog:  log.New(os.Stderr, "origin: ", 0),
	}
	for _, addr := range strings.Split(*listen, ",") {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatalf("origin: %v", err)
		}
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	}
	fmt.Println("READY")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	fmt.Fprintf(os.Stderr, "origin: %d ok, %d rejected\n", ok.Load(), rejected.Load())
}
