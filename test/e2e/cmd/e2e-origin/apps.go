package main

import (
	"encoding/json"
	"net/http"
	"net/http/cgi"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// The stateful services some tests need, next to the echo:
//
//   - /kv/store?k=K&v=V stores V under K; /kv/store-hdr?k=K stores the
//     X-Note header under K; /kv/load?k=K answers the stored value as
//     JSON {"v": V}. One store for every Host the origin plays, as a
//     service reachable under two names (redteam-2026-12-01 §2).
//   - /kv/trunc?n=N&q=Q answers 400 with an error quoting the first N
//     bytes of Q, as an API that cuts a bad parameter in its message.
//   - with -git-root, /git/... is `git http-backend` over CGI for the
//     repositories under that directory (push enabled per repository by
//     http.receivepack), answering 401 unless the request's Authorization
//     is exactly -git-auth ("Basic ...").

// kvStore is the /kv/ state.
type kvStore struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *kvStore) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	switch r.URL.Path {
	case "/kv/store":
		s.m[q.Get("k")] = q.Get("v")
	case "/kv/store-hdr":
		s.m[q.Get("k")] = r.Header.Get("X-Note")
	case "/kv/load":
	case "/kv/trunc":
		n, _ := strconv.Atoi(q.Get("n"))
		v := q.Get("q")
		if n >= 0 && n < len(v) {
			v = v[:n]
		}
		http.Error(w, "invalid parameter q: '"+v+"...'", http.StatusBadRequest)
		return
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"v": s.m[q.Get("k")]})
}

// gitHandler serves `git http-backend` under /git/ once the request's
// Authorization is exactly auth.
func gitHandler(root, auth string) http.Handler {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		gitPath = "/usr/bin/git"
	}
	backend := &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Root: "/git",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != auth {
			w.Header().Set("WWW-Authenticate", `Basic realm="e2e-git"`)
			http.Error(w, "credential required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})
}

// dispatch serves the stateful paths; false when path is none of them.
func (o *origin) dispatch(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case strings.HasPrefix(r.URL.Path, "/kv/"):
		o.kv.serve(w, r)
	case o.git != nil && strings.HasPrefix(r.URL.Path, "/git/"):
		o.git.ServeHTTP(w, r)
	default:
		return false
	}
	return true
}
