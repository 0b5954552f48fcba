package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func sample(rules int) *Report {
	r := &Report{Policies: "policies", Logs: []string{"a.log"}, Requests: 1000, BadLines: 1,
		BadLineSamples: []BadLine{{File: "a.log", Line: 7, Error: "malformed JSON", Text: "{oops | ```"}},
		StartMs:        1714564800000, EndMs: 1714564860000,
		Settings: Settings{Gateways: 4, Assignment: "round-robin", StoreLatency: "1ms", NATUsers: 20, BucketMs: 1000},
		Totals:   Totals{Matched: 900}}
	for i := 0; i < rules; i++ {
		rl := &Rule{Domain: "edge", Rule: fmt.Sprintf("rule-%d", i), Stage: "enforce", Limit: "10/1s", Pos: "p.cue:1:1",
			Counts: Counts{Requests: 100, WouldDeny: int64(i % 7), IdealDeny: 3, LegitDenials: 1},
			Series: Series{StartMs: 1714564800000, BucketMs: 1000, Requests: []int64{1, 5, 3}, WouldDeny: []int64{0, 2, 1},
				IdealDeny: []int64{0, 1, 1}, Lease: []int64{5, 5, 8}}}
		for j := 0; j < 10; j++ {
			rl.TopDenied = append(rl.TopDenied, Identity{Value: fmt.Sprintf("tenant=t%d|%s", j, strings.Repeat("x", 40)), Denials: 3, Requests: 9, Users: j})
		}
		r.Rules = append(r.Rules, rl)
	}
	r.Finish()
	return r
}

func TestJSONSchema(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, sample(2)); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "policies", "logs", "requests", "bad_lines", "bad_line_samples", "start_ms", "end_ms",
		"settings", "totals", "rules", "thresholds", "failed", "verdict"} {
		if _, ok := got[k]; !ok {
			t.Errorf("top-level key %q missing", k)
		}
	}
	if got["schema"] != Schema || got["requests"] != 1000.0 || got["bad_lines"] != 1.0 {
		t.Errorf("got schema %v requests %v bad_lines %v", got["schema"], got["requests"], got["bad_lines"])
	}
	rule := got["rules"].([]any)[0].(map[string]any)
	for _, k := range []string{"domain", "rule", "stage", "limit", "requests", "would_deny", "denied", "ideal_deny", "over_admission",
		"under_admission", "false_positives", "legit_denials", "nat_collateral", "stranded_tokens_max", "stranded_tokens_end",
		"lease_max", "store_calls", "top_denied", "series"} {
		if _, ok := rule[k]; !ok {
			t.Errorf("rule key %q missing", k)
		}
	}
}

func TestTotals(t *testing.T) {
	r := sample(3)
	if got, want := r.Totals.WouldDeny, int64(0+1+2); got != want {
		t.Errorf("would deny: got %d, want %d", got, want)
	}
	if got, want := r.Rules[0].Rule, "rule-2"; got != want {
		t.Errorf("first rule: got %s, want %s (most denials first)", got, want)
	}
}

func TestMarkdownFitsAComment(t *testing.T) {
	for _, n := range []int{1, 50, 2000} {
		var buf bytes.Buffer
		if err := WriteMarkdown(&buf, sample(n)); err != nil {
			t.Fatal(err)
		}
		s := buf.String()
		if len(s) > MaxMarkdown {
			t.Errorf("%d rules: got %d characters, want at most %d", n, len(s), MaxMarkdown)
		}
		if !strings.HasPrefix(s, "### rlctl simulate") {
			t.Errorf("%d rules: does not start with the heading", n)
		}
		if strings.Count(s, "<details>") != strings.Count(s, "</details>") {
			t.Errorf("%d rules: unbalanced <details>", n)
		}
		if strings.Contains(s, "{oops | ```") {
			t.Errorf("%d rules: bad line text not escaped", n)
		}
	}
}

func TestHTMLSelfContained(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, sample(3)); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, bad := range []string{"<script", "src=", "href=\"http", "@import", "url("} {
		if strings.Contains(s, bad) {
			t.Errorf("HTML contains %q: must load nothing", bad)
		}
	}
	if got, want := strings.Count(s, "<svg"), 6; got != want {
		t.Errorf("charts: got %d, want %d", got, want)
	}
	if !strings.Contains(s, "tenant=t1|xxxx") {
		t.Error("identity missing")
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sample(2), "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"requests 1000  bad lines 1", "edge/rule-1", "a.log:7: malformed JSON"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if err := Write(&buf, sample(1), "xml"); err == nil {
		t.Error("format xml: got nil error")
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {3, 5}, {7, 10}, {11, 20}, {250, 500}, {1000, 1000},
		{1001, 2000}, {0.3, 0.5}, {0.04, 0.05}, {0.1, 0.1}} {
		if got := niceCeil(tt.in); got != tt.want {
			t.Errorf("niceCeil(%g): got %g, want %g", tt.in, got, tt.want)
		}
	}
}

func TestWarningsInEveryFormat(t *testing.T) {
	r := sample(1)
	r.AssignMissing, r.Reordered, r.FirstReordered, r.Settings.Assignment = 10, 3, "a.log:17", "field:a_b|<c>"
	if got, want := len(Warnings(r)), 3; got != want {
		t.Fatalf("warnings: got %d, want %d: %q", got, want, Warnings(r))
	}
	for _, tt := range []struct {
		format string
		want   []string
	}{
		{"markdown", []string{
			"> ⚠️ 10 records (1.00%) lack the field of --assign field:a\\_b\\|\\<c\\>; they went to a gateway named \"unnamed\".\n\n",
			"> ⚠️ 3 records were logged before an earlier one of their log; they were replayed at the later time (the first at a.log:17).\n\n",
			"> ⚠️ No request carried a user (a JWT subject or a TLS fingerprint), so shared-NAT collateral cannot be seen in this log.\n\n"}},
		{"html", []string{
			`<div class="warn">&#9888; 10 records (1.00%) lack the field of --assign field:a_b|&lt;c&gt;; they went to a gateway named &#34;unnamed&#34;.</div>`,
			`<div class="warn">&#9888; 3 records were logged before an earlier one of their log; they were replayed at the later time (the first at a.log:17).</div>`,
			`<div class="warn">&#9888; No request carried a user (a JWT subject or a TLS fingerprint), so shared-NAT collateral cannot be seen in this log.</div>`}},
	} {
		var b strings.Builder
		if err := Write(&b, r, tt.format); err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s lacks %q", tt.format, w)
			}
		}
	}
	// A log in which no request matched a rule says so: every --fail-if passed on nothing.
	none := sample(1)
	none.Totals.Matched, none.Totals.RequestsWithUser = 0, 900
	if ws := Warnings(none); len(ws) != 1 || !strings.HasPrefix(ws[0], "No request matched any rule") {
		t.Errorf("no request matched: warnings %q, want the one saying so", ws)
	}
	// With users seen, and nothing missing or late, there is nothing to warn of.
	r.AssignMissing, r.Reordered, r.Totals.RequestsWithUser = 0, 0, 900
	for _, format := range []string{"markdown", "html"} {
		var b strings.Builder
		if err := Write(&b, r, format); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "⚠️") || strings.Contains(b.String(), `class="warn"`) {
			t.Errorf("%s: got a warning, want none", format)
		}
	}
}

// Without --fail-if no format says the run passed: every one says no thresholds were set, and
// pass or fail only when there were thresholds.
func TestVerdictInEveryFormat(t *testing.T) {
	for _, tt := range []struct {
		name       string
		thresholds []Threshold
		verdict    string
		want, not  map[string]string // by format
	}{
		{name: "none", verdict: VerdictNoThresholds,
			want: map[string]string{"table": "no thresholds set (--fail-if)", "json": `"verdict": "no_thresholds"`,
				"markdown": "### rlctl simulate: no thresholds set\n", "html": `<b class="none">no thresholds set</b>`},
			not: map[string]string{"table": "threshold ", "json": `"verdict": "pass"`, "markdown": "✅", "html": "pass<"}},
		{name: "held", thresholds: []Threshold{{Expr: "would_deny>1000", Value: 3}}, verdict: VerdictPass,
			want: map[string]string{"table": "threshold would_deny>1000: value 3: ok", "json": `"verdict": "pass"`,
				"markdown": "### rlctl simulate: ✅ within thresholds\n", "html": `<b class="ok">pass</b>`},
			not: map[string]string{"table": "no thresholds", "json": "no_thresholds", "markdown": "no thresholds", "html": "no thresholds"}},
		{name: "crossed", thresholds: []Threshold{{Expr: "would_deny>1", Value: 3, Crossed: true}}, verdict: VerdictFail,
			want: map[string]string{"table": "threshold would_deny>1: value 3: CROSSED", "json": `"verdict": "fail"`,
				"markdown": "### rlctl simulate: ❌ a threshold was crossed\n", "html": `<b class="bad">fail</b>`},
			not: map[string]string{"table": "no thresholds", "json": "no_thresholds", "markdown": "no thresholds", "html": "no thresholds"}},
	} {
		r := sample(2)
		r.Thresholds = tt.thresholds
		r.Failed = tt.verdict == VerdictFail
		if got := r.Verdict(); got != tt.verdict {
			t.Errorf("%s: verdict: got %q, want %q", tt.name, got, tt.verdict)
		}
		for _, format := range []string{"table", "json", "markdown", "html"} {
			var b strings.Builder
			if err := Write(&b, r, format); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.want[format]) {
				t.Errorf("%s: %s lacks %q", tt.name, format, tt.want[format])
			}
			if strings.Contains(b.String(), tt.not[format]) {
				t.Errorf("%s: %s has %q", tt.name, format, tt.not[format])
			}
		}
	}
}

// Every format explains its columns: the table in a footer, Markdown in a folded glossary,
// HTML in tooltips on the headings and a legend section.
func TestLegendInEveryFormat(t *testing.T) {
	r := sample(2)
	legend := Legend(r)
	for _, format := range []string{"table", "markdown", "html"} {
		var b strings.Builder
		if err := Write(&b, r, format); err != nil {
			t.Fatal(err)
		}
		s := b.String()
		for _, term := range legend {
			want := map[string]string{
				"table":    term.Name + "  ",
				"markdown": "- **" + term.Name + "**: " + mdText(term.Meaning) + "\n",
				"html":     "<dt>" + term.Name + "</dt><dd>" + htmlEscape(term.Meaning) + "</dd>",
			}[format]
			if format == "table" {
				want = term.Meaning
			}
			if !strings.Contains(s, want) {
				t.Errorf("%s: the legend lacks %q", format, want)
			}
		}
		if format == "markdown" && !strings.Contains(s, "<details><summary>What the columns mean</summary>") {
			t.Error("markdown: the legend is not folded")
		}
	}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"Would deny", "Ideal", "Over", "Under", "Stranded max", "Lease max", "Legit", "NAT"} {
		if want := `<th title="` + htmlEscape(meaning(legend, col)) + `">` + col + `</th>`; !strings.Contains(b.String(), want) {
			t.Errorf("html: the heading %s has no tooltip %q", col, want)
		}
	}
	for _, c := range chartTerms {
		if want := "<title>" + htmlEscape(c.Meaning) + "</title>"; !strings.Contains(b.String(), want) {
			t.Errorf("html: the chart %q has no tooltip", c.Name)
		}
		if !strings.Contains(b.String(), "<dt>"+c.Name+"</dt>") {
			t.Errorf("html: the legend does not explain the chart %q", c.Name)
		}
	}
}

// TestPct: a share short of all of them, or more than none, never reads as 100% or 0%.
func TestPct(t *testing.T) {
	for f, want := range map[float64]string{0: "0%", 0.00005: "<0.01%", 0.5: "50.00%", 29999.0 / 30000: ">99.99%", 1: "100.00%"} {
		if got := pct(f); got != want {
			t.Errorf("pct(%v) = %q, want %q", f, got, want)
		}
	}
}
