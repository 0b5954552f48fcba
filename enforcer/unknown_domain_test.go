package enforcer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A call naming a domain no policy defines is answered OK, as envoyproxy/ratelimit answers it,
// and counted and logged; a known domain's calls are not.
func TestUnknownDomainCountedAndLogged(t *testing.T) {
	in := spawn(t, testModel(), nil)
	for i := range 3 {
		resp := in.ask(t, "egde", []string{"stage=enforce", "user=u1"})
		if resp.OverallCode != ok || resp.Statuses[0].Code != ok {
			t.Errorf("call %d: got %v, want OK (no limit)", i, resp.OverallCode)
		}
	}
	in.ask(t, "edge", []string{"stage=enforce", "user=u1"})
	if got, want := in.metric(t, `rate_limit_unknown_domain_total{domain="egde"}`), 3.0; got != want {
		t.Errorf("unknown domain egde: got %v, want %v", got, want)
	}
	if got, want := in.metric(t, `rate_limit_unknown_domain_total{domain="_other"}`), 0.0; got != want {
		t.Errorf("_other: got %v, want %v (exported from the start)", got, want)
	}
	if got := in.metric(t, `rate_limit_unknown_domain_total{domain="edge"}`); got != -1 {
		t.Errorf("known domain edge: got %v, want no series", got)
	}
	lines := unknownDomainLines(t, in.logs.String())
	if len(lines) != 1 {
		t.Fatalf("log lines: got %d, want 1 (the others within a minute suppressed):\n%s", len(lines), in.logs.String())
	}
	if l := lines[0]; l["domain"] != "egde" || l["level"] != "WARN" {
		t.Errorf("log line: got %v, want domain egde at WARN", l)
	}
}

// The domain label has at most maxUnknownDomains values besides "_other": the first names seen
// keep their own; the calls of later names count under "_other".
func TestUnknownDomainCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_unknown_domain_total"}, []string{"domain"})
	reg.MustRegister(vec)
	u := newUnknownDomains(vec)
	log := slog.New(slog.DiscardHandler)
	const names = maxUnknownDomains + 50
	for round := range 2 {
		for i := range names {
			u.see(fmt.Sprintf("d%03d", i), 1_000+int64(round), log)
		}
	}
	u.see("bad\xffutf8", 2_000, log) // beyond the cap too
	got := map[string]float64{}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if len(got) != maxUnknownDomains+1 {
		t.Errorf("series: got %d, want %d", len(got), maxUnknownDomains+1)
	}
	for i := range maxUnknownDomains {
		if name := fmt.Sprintf("d%03d", i); got[name] != 2 {
			t.Errorf("%s: got %v, want 2", name, got[name])
		}
	}
	if want := float64(2*(names-maxUnknownDomains) + 1); got[otherDomain] != want {
		t.Errorf("_other: got %v, want %v", got[otherDomain], want)
	}
}

// A domain's calls are logged at most once a minute; the next line counts those suppressed.
// The names beyond the cap share the log limit of "_other".
func TestUnknownDomainLogRateLimited(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_unknown_domain_total"}, []string{"domain"})
	u := newUnknownDomains(vec)
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	const t0 = 1_714_564_800_000
	steps := []struct {
		domain string
		ms     int64
		logged bool
		// suppressed is the logged line's count of calls not logged before it
		suppressed float64
	}{
		{"nope", t0, true, 0},
		{"nope", t0 + 1, false, 0},
		{"other", t0 + 2, true, 0}, // another domain has a limit of its own
		{"nope", t0 + 59_999, false, 0},
		{"nope", t0 + 60_000, true, 2},
		{"nope", t0 + 60_001, false, 0},
		{"nope", t0 + 130_000, true, 1},
	}
	for i, st := range steps {
		buf.Reset()
		u.see(st.domain, st.ms, log)
		lines := unknownDomainLines(t, buf.String())
		if got := len(lines) == 1; got != st.logged {
			t.Errorf("step %d: logged: got %v, want %v", i, got, st.logged)
			continue
		}
		if st.logged && (lines[0]["domain"] != st.domain || lines[0]["suppressed"] != st.suppressed) {
			t.Errorf("step %d: got %v, want domain %s and suppressed %v", i, lines[0], st.domain, st.suppressed)
		}
	}
	// Fill the cap; then two new names within a minute make one line, under _other.
	for i := range maxUnknownDomains - len(u.byName) {
		u.see(fmt.Sprintf("fill%d", i), t0, log)
	}
	buf.Reset()
	u.see("late-1", t0+1000, log)
	u.see("late-2", t0+2000, log)
	lines := unknownDomainLines(t, buf.String())
	if len(lines) != 1 || lines[0]["domain"] != "late-1" || lines[0]["metric_domain"] != otherDomain {
		t.Errorf("beyond the cap: got %v, want one line of late-1 counted as _other", lines)
	}
}

// BenchmarkShouldRateLimitUnknownDomain is the path of a misspelt domain: every call of a
// misconfigured gateway takes it, so it is counted without allocating beyond the response.
func BenchmarkShouldRateLimitUnknownDomain(b *testing.B) {
	in := spawn(b, testModel(), nil)
	svc := service{e: in.Enforcer}
	req := request("egde", []string{"stage=big", "user=hot"})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// unknownDomainLines returns the unknown-domain lines of a JSON log.
func unknownDomainLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		if !strings.Contains(l, "unknown domain") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}
