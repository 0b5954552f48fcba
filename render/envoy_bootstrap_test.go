package render

import (
	"slices"
	"strings"
	"testing"
)

// TestBootstrapFindings: the bootstrap reports every finding of the fragments except the runtime
// flag assumption, the one thing it provides (its static runtime layer). It returned before the
// assumptions, so render --bootstrap said nothing of the x-ja4 header a client can forge, the
// placeholder jwt_authn provider, or the JWT claim that must be a string.
func TestBootstrapFindings(t *testing.T) {
	tests := []struct {
		policy string
		// kept are texts some bootstrap finding must contain; dropped, texts none may.
		kept, dropped []string
	}{
		{"policies", []string{"tls_fingerprint tier reads header x-ja4", `reads claim "plan"`, "the claim must be a string", "keeps only the first value of x-tenant-id", "use_remote_address"}, []string{FormatterRuntimeFlag}},
		{"kinds", []string{"tls_fingerprint tier reads header x-ja3", `reads claim "tier"`, "approximation: api/uploads_by_who"}, []string{FormatterRuntimeFlag}},
	}
	for _, tt := range tests {
		m := loadModel(t, envoyPolicies[tt.policy])
		frag, err := envoyTarget.Render(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		boot, err := envoyTarget.Render(m, Options{Envoy: EnvoyOptions{Bootstrap: true}})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, f := range frag.Findings {
			if f.Severity == Assumption && strings.Contains(f.Message, FormatterRuntimeFlag) {
				continue
			}
			want = append(want, f.String())
		}
		var got []string
		for _, f := range boot.Findings {
			got = append(got, f.String())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: bootstrap findings:\n%s\nwant the fragments' but the runtime flag:\n%s", tt.policy, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		all := strings.Join(got, "\n")
		for _, s := range tt.kept {
			if !strings.Contains(all, s) {
				t.Errorf("%s: no bootstrap finding says %q", tt.policy, s)
			}
		}
		for _, s := range tt.dropped {
			if strings.Contains(all, s) {
				t.Errorf("%s: a bootstrap finding says %q, which the bootstrap provides", tt.policy, s)
			}
		}
	}
}
