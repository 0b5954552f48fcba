package report

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// bigRule returns a rule that denied n identities, each with a long value.
func bigRule(name string, wouldDeny int64, n int) *Rule {
	rl := &Rule{Domain: "edge", Rule: name, Stage: "enforce", Limit: "10/1s", Counts: Counts{Requests: 100, WouldDeny: wouldDeny}}
	for j := range n {
		rl.TopDenied = append(rl.TopDenied, Identity{Value: fmt.Sprintf("client=%d-%s", j, strings.Repeat("f", 180)), Denials: 3, Requests: 9})
	}
	return rl
}

func TestMarkdownTrimsIdentitiesFairly(t *testing.T) {
	// The first rule's identities alone overflow a comment; the small rules after it fit.
	r := &Report{Requests: 1000, Settings: Settings{BucketMs: 1000}}
	r.Rules = append(r.Rules, bigRule("huge", 900, 400))
	for i := range 5 {
		r.Rules = append(r.Rules, bigRule(fmt.Sprintf("small-%d", i), int64(10-i), 3))
	}
	r.Finish()
	s := markdownWithin(t, r)
	for _, rl := range r.Rules {
		if want := "<details><summary><code>edge/" + rl.Rule + "</code>"; !strings.Contains(s, want) {
			t.Errorf("details of %s missing", rl.Rule)
		}
	}
	if strings.Contains(s, "Details of") {
		t.Error("got a note of rules left out, want every rule's details")
	}
	// Every rule shows the same number of identities, k, the most that fits.
	m := regexp.MustCompile(`_(\d+) more denied identities left out`).FindAllStringSubmatch(s, -1)
	if len(m) != 1 {
		t.Fatalf("notes of identities left out: got %d, want 1 (the huge rule's)", len(m))
	}
	left, _ := strconv.Atoi(m[0][1])
	k := 400 - left
	if k < 3 || k >= 400 {
		t.Errorf("huge rule shows %d identities, want at least 3 (as many as the small rules) and not all", k)
	}
	if got, want := strings.Count(s, "| `client="), k+5*3; got != want {
		t.Errorf("identity rows: got %d, want %d", got, want)
	}
	if len(s)+500 < MaxMarkdown {
		t.Errorf("got %d characters: room for more identities was left unused", len(s))
	}
}

func TestMarkdownCountsRulesLeftOut(t *testing.T) {
	// Too many rules for even their details without identities; half have no details at all,
	// and the names' lengths vary, so a later, smaller rule's details could fit where an
	// earlier one's did not.
	r := &Report{Requests: 1000, Settings: Settings{BucketMs: 1000}}
	var withDetails []string // in the order of the sorted rules
	for i := range 2000 {
		if i%2 == 0 {
			name := fmt.Sprintf("r%04d", i)
			if i%4 == 0 {
				name += strings.Repeat("n", 2000)
			}
			r.Rules = append(r.Rules, bigRule(name, int64(5000-i), 2))
			withDetails = append(withDetails, name)
		} else {
			r.Rules = append(r.Rules, &Rule{Domain: "edge", Rule: fmt.Sprintf("quiet%d", i)})
		}
	}
	r.Finish()
	s := markdownWithin(t, r)
	var shown []string
	for _, m := range regexp.MustCompile(`<details><summary><code>edge/([^<]*)</code>`).FindAllStringSubmatch(s, -1) {
		shown = append(shown, m[1])
	}
	if len(shown) == 0 || len(shown) == len(withDetails) {
		t.Fatalf("rules with details shown: got %d, want some of %d", len(shown), len(withDetails))
	}
	// The details kept are the most-denying rules': never a later rule's in place of an earlier.
	if !slices.Equal(shown, withDetails[:len(shown)]) {
		t.Errorf("details shown are not the first %d rules' in order", len(shown))
	}
	m := regexp.MustCompile(`Details of (\d+) more rules left out`).FindStringSubmatch(s)
	if m == nil {
		t.Fatal("no note of rules left out")
	}
	if got, want := m[1], strconv.Itoa(len(withDetails)-len(shown)); got != want {
		t.Errorf("rules left out: got %s, want %s (%d with details, %d shown)", got, want, len(withDetails), len(shown))
	}
}

func TestFitDetails(t *testing.T) {
	// details returns a rule's details whose head is n bytes long, with rows of 100 bytes.
	details := func(n, rows int) ruleDetails {
		d := ruleDetails{head: strings.Repeat("h", n)}
		for range rows {
			d.rows = append(d.rows, strings.Repeat("r", 100))
		}
		return d
	}
	end := len(detailsEnd)
	for i, tt := range []struct {
		rules  []ruleDetails
		budget int
		want   []int
	}{
		// Everything fits.
		{rules: []ruleDetails{details(10, 2), details(10, 1)}, budget: 1000, want: []int{2, 1}},
		// Rows are cut to the same number for every rule.
		{rules: []ruleDetails{details(10, 5), details(10, 5)},
			budget: 2*(10+end+len(identitiesHeader)+200+len(identitiesLeftOut(3))) + 5, want: []int{2, 2}},
		// Not even the heads fit: the first rule's fits, the second's not, and the third is
		// left out too though it would fit in what remains.
		{rules: []ruleDetails{details(10, 1), details(100, 1), details(10, 1)},
			budget: 3*(10+end+len(identitiesLeftOut(1))) + 5, want: []int{0, -1, -1}},
		// Not even the first rule's head fits.
		{rules: []ruleDetails{details(100, 0), details(10, 0)}, budget: 50, want: []int{-1, -1}},
		{rules: nil, budget: 0, want: []int{}},
	} {
		if got := fitDetails(tt.rules, tt.budget); !slices.Equal(got, tt.want) {
			t.Errorf("step %d: got %v, want %v", i, got, tt.want)
		}
	}
}

func TestMarkdownRequestFigures(t *testing.T) {
	r := sample(3)
	r.Totals.RequestsWouldDeny, r.Totals.RequestsDenied, r.Totals.DenyRate = 7, 4, 0.007
	r.Totals.WouldDeny = 2100 // the rules' decisions: more than the requests
	r.AssignMissing, r.Reordered, r.Settings.Assignment = 10, 3, "field:node"
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"| Requests would be denied (by any rule) | 7 (0.70% of requests) |", "| Requests rejected at their stage | 4 |",
		"Rule decisions, summed over rules (a request two rules deny counts twice)", "| Would deny | 2100 |",
		"> ⚠️ 10 records (1.00%) lack the field of --assign field:node; they went to a gateway named \"unnamed\".\n",
		"> ⚠️ 3 records were logged before an earlier one of their log"} {
		if !strings.Contains(s, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(s, "210") && strings.Contains(s, "% of requests") && !strings.Contains(s, "0.70% of requests") {
		t.Error("would-deny decisions shown as a share of requests")
	}
}

func TestMarkdownOversizedParts(t *testing.T) {
	// Bad lines and thresholds enough to overflow a comment on their own.
	for _, tt := range []struct {
		name       string
		bad, thres int
	}{{"bad lines", 2000, 0}, {"thresholds", 0, 3000}} {
		r := sample(5)
		r.BadLines = int64(tt.bad)
		for i := range tt.bad {
			r.BadLineSamples = append(r.BadLineSamples, BadLine{File: "a.log", Line: int64(i), Error: "bad", Text: strings.Repeat("z", 100)})
		}
		for i := range tt.thres {
			r.Thresholds = append(r.Thresholds, Threshold{Expr: fmt.Sprintf("would_deny>%d", i)})
		}
		var b strings.Builder
		if err := WriteMarkdown(&b, r); err != nil {
			t.Fatal(err)
		}
		if got := b.Len(); got > MaxMarkdown {
			t.Errorf("%s: got %d characters, want at most %d", tt.name, got, MaxMarkdown)
		}
		if s := b.String(); strings.Count(s, "<details>") != strings.Count(s, "</details>") {
			t.Errorf("%s: unbalanced <details>", tt.name)
		}
	}
}

func TestRuleDetailsSize(t *testing.T) {
	d := markdownRule(bigRule("r", 5, 4))
	for k := 0; k <= 4; k++ {
		if got, want := d.size(k), len(d.render(k)); got != want {
			t.Errorf("%d rows: size got %d, want %d (the rendered length)", k, got, want)
		}
	}
}

// markdownWithin writes r as markdown and fails the test when the comment is over the limit.
func markdownWithin(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if b.Len() > MaxMarkdown {
		t.Fatalf("got %d characters, want at most %d", b.Len(), MaxMarkdown)
	}
	return b.String()
}

// TestMdEscapeLongValues: two long values that share their first 200 bytes print apart.
func TestMdEscapeLongValues(t *testing.T) {
	a, b := strings.Repeat("x", 250)+"a", strings.Repeat("x", 250)+"b"
	if mdEscape(a) == mdEscape(b) {
		t.Errorf("two values cut to one: %q", mdEscape(a))
	}
	if got := mdEscape("short"); got != "short" {
		t.Errorf("a short value: %q", got)
	}
}
