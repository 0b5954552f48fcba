package render

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// promPolicy is the prometheus target's own test policy: a rule in every stage, two domains
// and a fail-closed rule. testdata/prometheus/rules_test.yaml tests the alerts rendered from it.
const promPolicy = "testdata/prometheus/policy"

// promRender loads the policy at dir and renders it with the prometheus target.
func promRender(t *testing.T, dir string) Result {
	t.Helper()
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return promRenderModel(t, m)
}

func promRenderModel(t *testing.T, m *policy.Model) Result {
	t.Helper()
	res, err := prometheusTarget.Render(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || res.Files[0].Name != PrometheusFile {
		t.Fatalf("got files %v, want one %s", promFileNames(res.Files), PrometheusFile)
	}
	return res
}

func promFileNames(fs []File) []string {
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	return names
}

// TestPrometheusGolden renders policies/ and the target's test policy, and the findings, against
// golden files. Run with -update to rewrite them.
func TestPrometheusGolden(t *testing.T) {
	for _, c := range []struct{ dir, golden string }{
		{"../policies", "policies.golden.yaml"},
		{promPolicy, "policy.golden.yaml"},
	} {
		t.Run(c.golden, func(t *testing.T) {
			res := promRender(t, c.dir)
			golden.Check(t, filepath.Join("testdata", "prometheus", c.golden), res.Files[0].Data)
			if c.dir != "../policies" {
				return
			}
			var buf bytes.Buffer
			for _, f := range res.Findings {
				buf.WriteString(f.String() + "\n")
			}
			golden.Check(t, filepath.Join("testdata", "prometheus", "findings.txt"), buf.Bytes())
		})
	}
}

// TestPrometheusDeterministic renders twice, and once more with the rules of each domain in
// reverse precedence order: the alerts are sorted by name, so all three are identical.
func TestPrometheusDeterministic(t *testing.T) {
	a := promRender(t, promPolicy).Files[0].Data
	b := promRender(t, promPolicy).Files[0].Data
	if !bytes.Equal(a, b) {
		t.Fatal("two renders differ")
	}
	m, err := schema.Load(promPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Domains {
		slices.Reverse(d.Rules)
	}
	if c := promRenderModel(t, m).Files[0].Data; !bytes.Equal(a, c) {
		t.Errorf("reordering rules changed the file:\n%s\nwant\n%s", c, a)
	}
}

// promFile is the rendered rule file, read back.
type promFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert       string
			Expr        string
			For         string
			Labels      map[string]string
			Annotations map[string]string
		}
	}
}

func promParse(t *testing.T, data []byte) promFile {
	t.Helper()
	var f promFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("the rendered file is not YAML: %v\n%s", err, data)
	}
	return f
}

// TestPrometheusStages checks which rules get a RateLimitRuleWouldDeny alert (shadow and soft
// only), what the breaker's severity is (critical only with a fail-closed rule), and that an
// owner holding "{{" stays literal text.
func TestPrometheusStages(t *testing.T) {
	rule := func(name string, stage policy.StageName, fm policy.FailureMode, owner string) *policy.Rule {
		return &policy.Rule{Name: name, Stage: policy.Stage{Name: stage}, FailureMode: fm, Owner: owner}
	}
	tests := []struct {
		name     string
		rules    []*policy.Rule
		wantDeny []string // rule:stage:owner of each RateLimitRuleWouldDeny, in file order
		breaker  string   // the breaker's severity
	}{
		{
			name:    "enforce only",
			rules:   []*policy.Rule{rule("a", policy.StageEnforce, policy.FailOpen, "")},
			breaker: "warning",
		},
		{
			name: "every stage",
			rules: []*policy.Rule{
				rule("z_shadow", policy.StageShadow, policy.FailOpen, "team-z"),
				rule("y_soft", policy.StageSoft, policy.FailOpen, ""),
				rule("x_canary", policy.StageCanary, policy.FailOpen, ""),
				rule("w_enforce", policy.StageEnforce, policy.FailOpen, ""),
			},
			wantDeny: []string{"y_soft:soft:", "z_shadow:shadow:team-z"},
			breaker:  "warning",
		},
		{
			name:    "fail-closed",
			rules:   []*policy.Rule{rule("pay", policy.StageEnforce, policy.FailClosed, ""), rule("b", policy.StageEnforce, policy.FailOpen, "")},
			breaker: "critical",
		},
		{
			name:     "template in owner",
			rules:    []*policy.Rule{rule("s", policy.StageShadow, policy.FailOpen, "team-{{ x }}")},
			wantDeny: []string{`s:shadow:{{ "team-{{ x }}" }}`},
			breaker:  "warning",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &policy.Model{Domains: []*policy.Domain{{Name: "d", Rules: tt.rules}}}
			f := promParse(t, promRenderModel(t, m).Files[0].Data)
			var deny []string
			breaker := ""
			for _, g := range f.Groups {
				for _, r := range g.Rules {
					switch r.Alert {
					case "RateLimitRuleWouldDeny":
						if g.Name != rolloutGroup {
							t.Errorf("%s in group %s, want %s", r.Alert, g.Name, rolloutGroup)
						}
						name, _, _ := strings.Cut(strings.TrimPrefix(r.Expr[strings.Index(r.Expr, `rule="`):], `rule="`), `"`)
						deny = append(deny, name+":"+r.Labels["stage"]+":"+r.Labels["owner"])
					case "RateLimitBreakerOpen":
						breaker = r.Labels["severity"]
					}
				}
			}
			if !slices.Equal(deny, tt.wantDeny) {
				t.Errorf("RateLimitRuleWouldDeny alerts: got %q, want %q", deny, tt.wantDeny)
			}
			if breaker != tt.breaker {
				t.Errorf("RateLimitBreakerOpen severity: got %q, want %q", breaker, tt.breaker)
			}
			if len(tt.wantDeny) == 0 && len(f.Groups) != 1 {
				t.Errorf("got %d groups, want only %s when no rule is in shadow or soft", len(f.Groups), enforcerGroup)
			}
		})
	}
}

// promtool returns the path of promtool, skipping the test when it is missing (failing it when
// CI=true): scripts/ensure-prometheus.sh installs it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not on PATH (required when CI=true; run scripts/ensure-prometheus.sh): %v", err)
		}
		t.Skipf("promtool not on PATH (scripts/ensure-prometheus.sh installs it): %v", err)
	}
	return path
}

// TestPrometheusPromtool runs the real promtool: `check rules` on the alerts rendered from
// policies/ and from the test policy, and `test rules` with testdata/prometheus/rules_test.yaml,
// whose input series and expected alerts show that each alert fires when it should and stays
// silent just under its threshold or for less than its `for`.
func TestPrometheusPromtool(t *testing.T) {
	bin := promtool(t)
	run := func(t *testing.T, dir string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, src := range []string{"../policies", promPolicy} {
		t.Run("check/"+filepath.Base(src), func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteDir(dir, promRender(t, src).Files); err != nil {
				t.Fatal(err)
			}
			run(t, dir, "check", "rules", PrometheusFile)
		})
	}
	t.Run("test", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteDir(dir, promRender(t, promPolicy).Files); err != nil {
			t.Fatal(err)
		}
		tests, err := os.ReadFile(filepath.Join("testdata", "prometheus", "rules_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, dir, "test", "rules", "rules_test.yaml")
	})
}
