package scrub

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"io"
	"syscall"
	"testing"
	"time"
)

// reportCPU reports the process's CPU time per iteration (cpu-ns/op)
// beside the wall time: on a loaded machine the wall time measures the
// scheduler as much as the code. Call it at the start of the benchmark;
// the returned func at its end.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() {
		b.ReportMetric(float64((processCPU(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStream: the scrubbing reader over 1 MiB of JSON-like text (a
// language model's output) and of random bytes, 32 KiB reads as
// ReverseProxy does.
func BenchmarkStream(b *testing.B) {
	m := mustCompile(b, testSecrets[:2])
	raw := make([]byte, 1<<20)
	_, _ = rand.Read(raw)
	text := bytes.Repeat([]byte(`{"id":"chatcmpl-123","object":"chat.completion.chunk","choices":[{"delta":{"content":"Hello, world. `+base64.StdEncoding.EncodeToString(raw[:30])+`"}}]}`+"\n\n"), 1<<20/150)
	for name, data := range map[string][]byte{"text": text, "random": raw} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			buf := make([]byte, 32<<10)
			defer reportCPU(b)()
			for b.Loop() {
				r := m.NewReader(bytes.NewReader(data), nil)
				for {
					if _, err := r.Read(buf); err == io.EOF {
						break
					}
				}
			}
		})
	}
}

// BenchmarkCompile: building the automaton of two secrets (a cache miss).
func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		_, _ = Compile(testSecrets[:2])
	}
}

// BenchmarkStreamBenchOrigin: the body of bench/origin's /stream (the
// alphabet repeated) under bench/runner's token, the bench/run.sh cell.
func BenchmarkStreamBenchOrigin(b *testing.B) {
	const token = "bench-secret-token-0123456789abcdef"
	m := mustCompile(b, []Secret{{Ref: "origin-token", Value: []byte(token), Header: "Bearer " + token}})
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	b.SetBytes(int64(len(data)))
	buf := make([]byte, 32<<10)
	defer reportCPU(b)()
	for b.Loop() {
		r := m.NewReader(bytes.NewReader(data), nil)
		for {
			if _, err := r.Read(buf); err == io.EOF {
				break
			}
		}
	}
}
