package proxy

import (
	"net/http/httptest"
	"testing"
)

// TestWritePlainHint: the second body line, and only that, becomes
// X-Botbox-Hint; a one-line body gets no hint header.
func TestWritePlainHint(t *testing.T) {
	for _, tc := range []struct{ body, hint string }{
		{bodyDenied, ""},
		{bodyDenied + "\n", ""},
		{bodyDenied + "\n" + hintPortNotAllowed + "\n", hintPortNotAllowed},
		{bodyConnect + "\n" + hintConnect + "\n", hintConnect},
		{"a\nb\nc\n", "b"},
	} {
		w := httptest.NewRecorder()
		writePlain(w, 403, tc.body, "r")
		if got, ok := w.Header()[HeaderHint]; tc.hint == "" && ok || tc.hint != "" && (len(got) != 1 || got[0] != tc.hint) {
			t.Errorf("%q: %s = %q, want %q", tc.body, HeaderHint, got, tc.hint)
		}
	}
}
