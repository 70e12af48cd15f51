package engine

import "strings"

// attackShapes are the red team's additions to smugglingShapes (heads at
// the read buffer's edge, bare CR and LF, obs-fold in framing fields,
// leading CRLF, chunk-size oddities, hand-over with bytes behind the
// head): TestEngineReadsLikeNetHTTP and FuzzEngineMatchesNetHTTP's seeds
// run them too (init below).
var attackShapes = []string{
	"\r\nGET /leading-crlf HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx\r\n\r\n\r\nGET /after-three-crlf HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx\n\nGET /after-lf HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\n\rX: b\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\n\n",
	"GET / HTTP/1.1\r\nHost: a\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n: empty-name\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n 3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent_Length: 5\r\n\r\nhelloGET /u HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\r\nc\"\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\rhello\r0\r\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 9\r\nHost: evil\r\n\r\nGET /after-trailer HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\r\nGET /crlf-after-chunked HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\nGET http://c/ HTTP/1.1\r\nHost: c\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: \"\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost:  b \t\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: b\r\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost:\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: b/c\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: b\x00\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nX: y\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n",
	"GET / HTTP/1.1\r\nHost:\r\n\r\n",
	"GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\nGET /never HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nexpect: 100-continue\r\nContent-Length: 3\r\n\r\nabcGET /after-expect HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /up HTTP/1.1\r\nHost: a\r\nUpgrade: x\r\nContent-Length: 2\r\n\r\nhiGET /after-up HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.0\r\nHost: a\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Many: v\r\n", 300) + "\r\n",
}

// edgeHead returns a request head of exactly n bytes (padded in one
// field), followed by a body and a second request.
func edgeHead(n int, method string) string {
	const pre, post = "Host: a\r\nContent-Length: 3\r\nX: ", "\r\n\r\n"
	line := method + " / HTTP/1.1\r\n"
	pad := n - len(line) - len(pre) - len(post)
	return line + pre + strings.Repeat("p", pad) + post + "abcGET /next HTTP/1.1\r\nHost: a\r\n\r\n"
}

func init() {
	for _, n := range []int{4094, 4095, 4096, 4097, 4098, readBufferSize - 1 + 2} {
		attackShapes = append(attackShapes, edgeHead(n, "POST"))
	}
	// A first request that leaves the next head straddling the buffer's
	// end: request 1 is 3000 bytes, request 2's head 1500.
	attackShapes = append(attackShapes, edgeHead(2997, "POST")[:2997+3]+edgeHead(1500, "POST"))
	smugglingShapes = append(smugglingShapes, attackShapes...)
}
