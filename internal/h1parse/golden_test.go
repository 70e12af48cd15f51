package h1parse

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenWires are the ways TestGolden feeds each golden input to both
// parsers: whole, in small reads into a small buffer ending in a connection
// error, with bodies only closed and the error coming with the last bytes,
// and with bodies closed after one short read.
var goldenWires = []wire{
	{bufSize: 4096, maxReqs: 8},
	{bufSize: 32, chunks: []int{1, 7, 3}, endErr: errConnReset, readSize: 2, maxReqs: 8},
	{bufSize: 4096, drainOnly: true, endErr: errConnReset, errWithData: true, maxReqs: 8},
	{bufSize: 64, drainOnly: true, readSize: 2, maxReqs: 8},
}

// TestGolden runs every testdata/requests/*.txtar. The "request" section is
// the input as Go string literals, one or more lines, concatenated. The
// "want" section is what ReadRequest makes of it, request after request:
// which parser read the head (fast or net/http), the parsed head, the body
// and its errors. Every input must also read identically through
// http.ReadRequest, fed in every way of goldenWires. Run with -update to
// rewrite the want sections.
func TestGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "requests", "*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			t.Parallel()
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			in, err := goldenInput(ar)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range goldenWires {
				if d, _ := differ(in, w); d != "" {
					t.Errorf("differs from net/http (wire %+v): %s", w, d)
				}
			}
			i := slices.IndexFunc(ar.Files, func(f txtar.File) bool { return f.Name == "want" })
			got := render(in)
			if *update {
				if i < 0 {
					ar.Files = append(ar.Files, txtar.File{Name: "want"})
					i = len(ar.Files) - 1
				}
				ar.Files[i].Data = []byte(got)
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if i < 0 {
				t.Fatalf("%s has no want section; run go test -update", file)
			}
			if d := cmp.Diff(string(ar.Files[i].Data), got); d != "" {
				t.Errorf("%s mismatch (-want +got); run go test -update:\n%s", file, d)
			}
		})
	}
}

// goldenInput decodes a golden file's "request" section: Go string
// literals, one a line, concatenated.
func goldenInput(ar *txtar.Archive) ([]byte, error) {
	i := slices.IndexFunc(ar.Files, func(f txtar.File) bool { return f.Name == "request" })
	if i < 0 {
		return nil, fmt.Errorf("no request section")
	}
	var in bytes.Buffer
	for n, line := range strings.Split(strings.TrimSpace(string(ar.Files[i].Data)), "\n") {
		s, err := strconv.Unquote(line)
		if err != nil {
			return nil, fmt.Errorf("request line %d: %v", n+1, err)
		}
		in.WriteString(s)
	}
	return in.Bytes(), nil
}

// render describes what ReadRequest makes of the input, request after
// request, until an error or eight requests.
func render(in []byte) string {
	w := wire{bufSize: 4096, maxReqs: 8}
	br := w.reader(in)
	var b strings.Builder
	for n := 0; n < w.maxReqs; n++ {
		req, fast, err := read(br)
		engine := "net/http"
		if fast {
			engine = "fast"
		}
		fmt.Fprintf(&b, "== request %d: %s\n", n, engine)
		o := readOutcome(req, err, w)
		if err != nil {
			fmt.Fprintf(&b, "error %q\n", err)
			break
		}
		b.WriteString(describeRequest(req))
		fmt.Fprintf(&b, "body %q\nbody-error %s\nclose-error %s\n", o.body, errString(o.bodyErr), errString(o.closeErr))
	}
	return b.String()
}
