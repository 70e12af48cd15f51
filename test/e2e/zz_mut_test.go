package e2e

import ("testing";"time")

func TestZZMutation(t *testing.T) {
	start := time.Now()
	p := newPod(t, podConfig{rules: rulesAT, noInstall: true, secrets: map[string]string{"at-secret": "x"}})
	t.Logf("setup %v", time.Since(start))
	t.Cleanup(func(){ t.Logf("cleanup start %v", time.Since(start)) })
	mark := p.mark(t)
	r := p.app(t, "http", "-url", "https://api.example.test/", "-cacert", p.originCA)
	t.Logf("https %v: %+v", time.Since(start), r.Status)
	p.assertNoTCP(t, mark, p.addr4(443))
	t.Logf("barrier %v", time.Since(start))
	s := time.Now(); p.botbox.stop(5*time.Second); t.Logf("botbox stop %v", time.Since(s))
	s = time.Now(); p.origin.stop(5*time.Second); t.Logf("origin stop %v", time.Since(s))
}
