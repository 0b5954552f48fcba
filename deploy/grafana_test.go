package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dashboardFile is the Grafana dashboard for the enforcer's metrics.
const dashboardFile = "grafana/rlctl-enforcer.json"

// dashboard is the part of a Grafana dashboard's JSON model that holds queries.
type dashboard struct {
	UID        string      `json:"uid"`
	Title      string      `json:"title"`
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []dashVariable `json:"list"`
	} `json:"templating"`
}

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *dashDatasource `json:"datasource"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"` // a collapsed row's
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashVariable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"` // a string, or {"query": "..."}
}

// dashQuery is one PromQL expression of the dashboard and where it is.
type dashQuery struct {
	where, expr string
}

// readDashboard decodes the dashboard and returns its PromQL expressions, those of the panels
// and those inside the label_values() of its query variables, with the names of its variables.
func readDashboard(t *testing.T) (dashboard, []dashQuery, []string) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var queries []dashQuery
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q: no queries", p.ID, p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d %q: want the datasource ${datasource}, so that users pick their Prometheus", p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				queries = append(queries, dashQuery{fmt.Sprintf("panel %d %q, query %s", p.ID, p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	walk(d.Panels)
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query: %v", v.Name, err)
			}
			q = obj.Query
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q: want label_values(SELECTOR, LABEL)", v.Name, q)
			continue
		}
		// label_values(sel, label) asks for the label of the series sel selects: check it as
		// a grouping by that label.
		queries = append(queries, dashQuery{"variable " + v.Name, "count by (" + m[2] + ") (" + m[1] + ")"})
	}
	if !slices.Contains(vars, "datasource") {
		t.Error("no datasource variable")
	}
	return d, queries, vars
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// Grafana's variables as a query sends them to Prometheus: the interval ones become a
// duration, and the dashboard's own (multi-value, in regular-expression matchers) a regular
// expression.
var (
	grafanaInterval = regexp.MustCompile(`\$(?:__rate_interval|__interval|__range)\b|\$\{(?:__rate_interval|__interval|__range)\}`)
	grafanaVar      = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
)

// expandGrafana replaces the variables of expr as Grafana would; a variable the dashboard
// does not define is an error.
func expandGrafana(expr string, vars []string) (string, error) {
	expr = grafanaInterval.ReplaceAllString(expr, "5m")
	var err error
	expr = grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		if !slices.Contains(vars, name) {
			err = fmt.Errorf("unknown variable $%s", name)
		}
		return ".*"
	})
	return expr, err
}

// PromQL, read with regular expressions: enough to find what a dashboard's expressions name,
// without prometheus/promql/parser and the few hundred modules it would bring into go.mod.
// promtool, in TestGrafanaDashboardParses, parses them for real.
var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promSelector = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promIdent    = regexp.MustCompile(`\b([A-Za-z_:][A-Za-z0-9_:]*)\b\s*(\(?)`)
)

// promKeywords are the PromQL words that are neither metrics nor followed by '('.
var promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on",
	"ignoring", "group_left", "group_right", "inf", "nan", "Inf", "NaN"}

// promRefs returns what expr names: each metric with the labels its selectors match, and the
// labels it groups or matches by. A word followed by '(' is a function or an aggregation.
func promRefs(expr string) (metrics map[string][]string, grouping []string) {
	metrics = map[string][]string{}
	e := promString.ReplaceAllString(expr, `""`)
	for _, g := range promGrouping.FindAllStringSubmatch(e, -1) {
		for l := range strings.SplitSeq(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
	}
	e = promGrouping.ReplaceAllString(e, " ")
	for _, s := range promSelector.FindAllStringSubmatch(e, -1) {
		if _, ok := metrics[s[1]]; !ok {
			metrics[s[1]] = nil // named, with no label matchers yet
		}
		for _, m := range promMatcher.FindAllStringSubmatch(s[2], -1) {
			metrics[s[1]] = append(metrics[s[1]], m[1])
		}
	}
	e = promSelector.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	for _, id := range promIdent.FindAllStringSubmatch(e, -1) {
		if _, ok := metrics[id[1]]; !ok && id[2] == "" && !slices.Contains(promKeywords, id[1]) {
			metrics[id[1]] = nil
		}
	}
	return metrics, grouping
}

func TestPromRefs(t *testing.T) {
	tests := []struct {
		expr     string
		metrics  map[string][]string
		grouping []string
	}{
		{`up > 0`, map[string][]string{"up": nil}, nil},
		{`sum by (a, b) (rate(x_total{c="v{}", d=~"sum|rate"}[5m])) / sum by (a) (rate(y[1m])) > 0.01`,
			map[string][]string{"x_total": {"c", "d"}, "y": nil}, []string{"a", "b", "a"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))`, map[string][]string{"h_bucket": nil}, []string{"le"}},
		{`time() - max without (i) (g offset 1m) and on (j) w`, map[string][]string{"g": nil, "w": nil}, []string{"i", "j"}},
		{`sum(rate(s_sum[5m])) / sum(rate(s_count{q!="by (z)"}[5m]))`, map[string][]string{"s_sum": nil, "s_count": {"q"}}, nil},
	}
	for i, tt := range tests {
		metrics, grouping := promRefs(tt.expr)
		if len(metrics) != len(tt.metrics) {
			t.Errorf("step %d: got metrics %v, want %v", i, metrics, tt.metrics)
		}
		for name, labels := range tt.metrics {
			if got, ok := metrics[name]; !ok || !slices.Equal(got, labels) {
				t.Errorf("step %d: metric %s: got labels %v (present %v), want %v", i, name, got, ok, labels)
			}
		}
		if !slices.Equal(grouping, tt.grouping) {
			t.Errorf("step %d: got grouping %v, want %v", i, grouping, tt.grouping)
		}
	}
}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"instance", "job"}

// exportedAs resolves a name a query uses to the metric family the enforcer exports: a
// histogram's series are NAME_bucket (with le), NAME_sum and NAME_count.
func exportedAs(name string, exported map[string]exportedMetric) (family string, extra []string, ok bool) {
	if _, ok := exported[name]; ok {
		return name, nil, true
	}
	for suffix, labels := range map[string][]string{"_bucket": {"le"}, "_sum": nil, "_count": nil} {
		if base, cut := strings.CutSuffix(name, suffix); cut && exported[base].histogram {
			return base, labels, true
		}
	}
	return "", nil, false
}

// TestGrafanaDashboardMetrics checks every query of the dashboard against a running enforcer:
// each metric it names is one the enforcer's registry exports, and each label it matches or
// groups by is one that metric carries (or one Prometheus adds to a scrape).
func TestGrafanaDashboardMetrics(t *testing.T) {
	_, queries, vars := readDashboard(t)
	exported := enforcerMetrics(t)
	for _, q := range queries {
		expr, err := expandGrafana(q.expr, vars)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		metrics, grouping := promRefs(expr)
		if len(metrics) == 0 {
			t.Errorf("%s: no metric in %q", q.where, q.expr)
		}
		for name, labels := range metrics {
			family, extra, ok := exportedAs(name, exported)
			if !ok {
				t.Errorf("%s: the enforcer exports no metric %s", q.where, name)
				continue
			}
			have := slices.Concat(exported[family].labels, extra, targetLabels)
			for _, l := range slices.Concat(labels, grouping) {
				if !slices.Contains(have, l) {
					t.Errorf("%s: %s has no label %s (it has %v)", q.where, name, l, exported[family].labels)
				}
			}
		}
	}
}

// TestGrafanaDashboardCoversMetrics fails when the enforcer exports a rate_limit_ metric that
// no panel shows: a new metric needs a panel in deploy/grafana/rlctl-enforcer.json.
func TestGrafanaDashboardCoversMetrics(t *testing.T) {
	_, queries, vars := readDashboard(t)
	exported := enforcerMetrics(t)
	shown := map[string]bool{}
	for _, q := range queries {
		expr, _ := expandGrafana(q.expr, vars)
		metrics, _ := promRefs(expr)
		for name := range metrics {
			if family, _, ok := exportedAs(name, exported); ok {
				shown[family] = true
			}
		}
	}
	var missing []string
	for name := range exported {
		if strings.HasPrefix(name, "rate_limit_") && !shown[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("the enforcer exports %s, which no panel of %s shows: add one", name, dashboardFile)
	}
}

// TestGrafanaDashboardParses runs promtool check rules on every query of the dashboard (each as
// a recording rule, variables expanded as Grafana sends them): Prometheus's own parser.
// Without promtool the test is skipped, except in CI (CI=true), where make test's deps
// install it.
func TestGrafanaDashboardParses(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not on PATH (scripts/ensure-prometheus.sh installs it)")
		}
		t.Skip("promtool is not on PATH; run scripts/ensure-prometheus.sh")
	}
	_, queries, vars := readDashboard(t)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	where := map[string]string{}
	for i, q := range queries {
		expr, err := expandGrafana(q.expr, vars)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		record := fmt.Sprintf("dashboard:query_%d", i)
		where[record] = q.where
		rules = append(rules, rule{record, expr})
	}
	file := map[string]any{"groups": []map[string]any{{"name": "grafana", "rules": rules}}}
	data, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		var legend strings.Builder
		for i := range rules {
			fmt.Fprintf(&legend, "  dashboard:query_%d is %s\n", i, where[rules[i].Record])
		}
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, legend.String())
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(string(out), want) {
		t.Errorf("promtool check rules: got %s, want %q", out, want)
	}
}
