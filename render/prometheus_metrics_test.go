package render_test

// This file is an external test package so that it may import the enforcer even if the enforcer
// comes to import render.

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rlctl/rlctl/internal/docgen"
	"github.com/rlctl/rlctl/render"
	"github.com/rlctl/rlctl/schema"
)

// enforcerMetrics starts real enforcers on the policy in dir (docgen.EnforcerMetrics: one on
// its snapshot, one subscribed over xDS, for rate_limit_xds_connected), scrapes their /metrics,
// and returns each metric name with the label names its series carry, and the job and instance
// labels that a scrape adds; and the series Prometheus itself writes: up for each target, and
// ALERTS for each pending or firing alert (RateLimitEnforcerDown reads its own). Every
// series the alerts read exists before the first request: the enforcer starts its per-rule and
// per-reason series at 0.
func enforcerMetrics(t *testing.T, dir string) map[string][]string {
	t.Helper()
	ms, err := docgen.EnforcerMetrics(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	scrape := []string{"job", "instance"}
	metrics := map[string][]string{"up": scrape, "ALERTS": append([]string{"alertname", "alertstate", "severity"}, scrape...)}
	for _, m := range ms {
		metrics[m.Name] = append(slices.Clone(m.Labels), scrape...)
	}
	return metrics
}

// promFuncs are the PromQL words the alerts may use besides metric and label names. An
// identifier in an expression that is neither one of these nor a metric the enforcer exports
// fails TestPrometheusMetricsExist: add a function here when an alert starts using it.
var promFuncs = []string{
	"sum", "min", "max", "avg", "count", "rate", "increase", "irate", "delta",
	"min_over_time", "max_over_time", "avg_over_time", "absent", "and", "or", "unless", "on",
	"ignoring", "bool", "group_left", "group_right",
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promSelector = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*""`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent    = regexp.MustCompile(`\b[A-Za-z_:][A-Za-z0-9_:]*`)
)

// promRefs is what one PromQL expression refers to: metric names, with the label names of
// their selectors, and the labels it groups or matches by (by, without, on, ignoring).
type promRefs struct {
	metrics  map[string][]string
	grouping []string
}

// promExprRefs extracts the references of expr with regular expressions, for the simple
// expressions the target renders (selectors, functions, aggregations by labels, arithmetic and
// comparisons). It does not use the PromQL parser, which would pull prometheus/prometheus and a
// few hundred modules into go.mod; promtool, in TestPrometheusPromtool, parses the real thing.
func promExprRefs(expr string) promRefs {
	r := promRefs{metrics: map[string][]string{}}
	e := promString.ReplaceAllString(expr, `""`)
	for _, g := range promGrouping.FindAllStringSubmatch(e, -1) {
		for l := range strings.SplitSeq(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				r.grouping = append(r.grouping, l)
			}
		}
	}
	e = promGrouping.ReplaceAllString(e, " ")
	for _, s := range promSelector.FindAllStringSubmatch(e, -1) {
		labels := r.metrics[s[1]]
		for _, mt := range promMatcher.FindAllStringSubmatch(s[2], -1) {
			labels = append(labels, mt[1])
		}
		r.metrics[s[1]] = labels
	}
	e = promSelector.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	for _, id := range promIdent.FindAllString(e, -1) {
		if !slices.Contains(promFuncs, id) {
			if _, ok := r.metrics[id]; !ok {
				r.metrics[id] = nil
			}
		}
	}
	return r
}

func TestPromExprRefs(t *testing.T) {
	tests := []struct {
		expr     string
		metrics  map[string][]string
		grouping []string
	}{
		{`up > 0`, map[string][]string{"up": nil}, nil},
		{`sum by (a, b) (rate(x_total{c="v{}", d=~"sum|rate"}[5m])) / sum by (a) (rate(y[1m])) > 0.01`,
			map[string][]string{"x_total": {"c", "d"}, "y": nil}, []string{"a", "b", "a"}},
		{`increase(z{r="by (q)"}[10m]) > 0`, map[string][]string{"z": {"r"}}, nil},
		{`max_over_time(typo_metric[1m]) and on (i) w`, map[string][]string{"typo_metric": nil, "w": nil}, []string{"i"}},
	}
	for i, tt := range tests {
		got := promExprRefs(tt.expr)
		if len(got.metrics) != len(tt.metrics) {
			t.Errorf("step %d: got metrics %v, want %v", i, got.metrics, tt.metrics)
		}
		for name, labels := range tt.metrics {
			if gl, ok := got.metrics[name]; !ok || !slices.Equal(gl, labels) {
				t.Errorf("step %d: metric %s: got labels %v (present %v), want %v", i, name, gl, ok, labels)
			}
		}
		if !slices.Equal(got.grouping, tt.grouping) {
			t.Errorf("step %d: got grouping %v, want %v", i, got.grouping, tt.grouping)
		}
	}
}

// TestPrometheusMetricsExist keeps the alerts in step with the enforcer: every metric an alert
// reads, every label its selectors match and every label it groups by, must be one that a real
// enforcer exports for the same policy. So must the series that the promtool unit tests
// (testdata/prometheus/rules_test.yaml) feed in, besides the instance and job labels that
// Prometheus adds to a scrape.
func TestPrometheusMetricsExist(t *testing.T) {
	target, _ := render.Lookup("prometheus")
	for _, dir := range []string{"../policies", "testdata/prometheus/policy"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, err := schema.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			exported := enforcerMetrics(t, dir)
			res, err := target.Render(m, render.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var file struct {
				Groups []struct {
					Rules []struct{ Alert, Expr string }
				}
			}
			if err := yaml.Unmarshal(res.Files[0].Data, &file); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range file.Groups {
				for _, r := range g.Rules {
					n++
					refs := promExprRefs(r.Expr)
					if len(refs.metrics) == 0 {
						t.Errorf("%s: no metric found in %q", r.Alert, r.Expr)
					}
					for name, labels := range refs.metrics {
						have, ok := exported[name]
						if !ok {
							t.Errorf("%s: the enforcer exports no metric %s", r.Alert, name)
							continue
						}
						for _, l := range append(labels, refs.grouping...) {
							if !slices.Contains(have, l) {
								t.Errorf("%s: %s has no label %s (it has %v)", r.Alert, name, l, have)
							}
						}
					}
				}
			}
			if n == 0 {
				t.Fatal("no alerts rendered")
			}
			if dir == "testdata/prometheus/policy" {
				checkUnitTestSeries(t, exported)
			}
		})
	}
}

// checkUnitTestSeries checks that the input series of the promtool unit tests are series the
// enforcer exports.
func checkUnitTestSeries(t *testing.T, exported map[string][]string) {
	t.Helper()
	data, err := os.ReadFile("testdata/prometheus/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			InputSeries []struct{ Series string } `yaml:"input_series"`
		}
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			n++
			refs := promExprRefs(s.Series)
			for name, labels := range refs.metrics {
				have, ok := exported[name]
				if !ok {
					t.Errorf("rules_test.yaml: series %s: the enforcer exports no metric %s", s.Series, name)
					continue
				}
				for _, l := range labels {
					if l != "instance" && l != "job" && !slices.Contains(have, l) {
						t.Errorf("rules_test.yaml: series %s: %s has no label %s (it has %v)", s.Series, name, l, have)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("rules_test.yaml has no input series")
	}
}
