package lint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/schema"
)

func TestGoodRepo(t *testing.T) {
	fs, err := Run("testdata/good")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Fatalf("got %d findings, want none:\n%s", len(fs), lines(fs))
	}
}

// TestBadRepos lints each repository under testdata/bad and compares the text output with its
// want.txt (go test -update rewrites them). Each directory is named after the rule it breaks; the
// loader refuses a few checks outright (the model's own, and the schema's canary percent) and
// lint reports them under their own IDs.
func TestBadRepos(t *testing.T) {
	wantID := map[string]string{
		"RL000-schema":                "RL000",
		"RL000-syntax":                "RL000",
		"RL001-duplicate-match":       "RL001", // refused by the loader, reported under its check
		"RL002-unreachable-rule":      "RL002",
		"RL003-unknown-descriptor":    "RL003",
		"RL004-exact-range":           "RL004",
		"RL005-lease-bounds":          "RL005", // refused by the loader, reported under its check
		"RL006-lease-stranding":       "RL006",
		"RL007-drift-over-tolerance":  "RL007",
		"RL008-fail-open-critical":    "RL008",
		"RL009-fail-closed-reason":    "RL009",
		"RL010-per-ip-nat":            "RL010",
		"RL011-hot-key":               "RL011",
		"RL012-store-timeout":         "RL012",
		"RL013-canary-percent":        "RL013", // refused by the schema, reported under its check
		"RL014-stage-since":           "RL014",
		"RL015-region-shares":         "RL015",
		"RL016-cost-over-capacity":    "RL016",
		"RL017-low-watermark":         "RL017",
		"RL018-envoy-key-collision":   "RL018",
		"RL019-fail-open-no-fallback": "RL019",
		"RL027-path-with-query":       "RL027",
		"RL028-shard-rounding":        "RL028",
		"RL029-empty-domain":          "RL029",
		"RL030-literal-pattern":       "RL030",
	}
	dirs, err := os.ReadDir("testdata/bad")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != len(wantID) {
		t.Errorf("got %d directories in testdata/bad, want %d", len(dirs), len(wantID))
	}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			want, ok := wantID[d.Name()]
			if !ok {
				t.Fatalf("no expected ID for testdata/bad/%s", d.Name())
			}
			dir := filepath.Join("testdata", "bad", d.Name())
			fs, err := Run(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) == 0 {
				t.Errorf("got no findings, want %s", want)
			}
			for _, f := range fs {
				if f.ID != want {
					t.Errorf("got %s, want only %s findings", f, want)
				}
				if f.Pos.File == "" || f.Pos.Line == 0 || f.Pos.Col == 0 {
					t.Errorf("got finding without file:line:col: %s", f)
				}
			}
			var buf bytes.Buffer
			if err := (finding.Text{}).Write(&buf, &finding.Report{Findings: fs}); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(dir, "want.txt"), buf.Bytes())
		})
	}
}

// TestRunPastLoaderChecks: a problem the loader refuses but that leaves a model (lease bounds,
// RL005) does not hide lint's other findings about the same policy.
func TestRunPastLoaderChecks(t *testing.T) {
	dir := t.TempDir()
	src := `package policies

domains: edge: {
	sources: tenant: {kind: "header", header: "x-tenant-id"}
	rules: a: {match: [{key: "tenant", value: "a"}], limits: [{requests: 10, window: "1s"}], lease: {min: 50, max: 20}}
	rules: b: {match: [{key: "tenant", value: "b"}], limits: [{requests: 10, window: "1s"}], failure: mode: "closed"}
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := Run(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range fs {
		got[f.ID]++
	}
	// RL005 from the loader's check; RL009 (fail-closed without a reason) from lint's own.
	if got["RL005"] != 1 || got["RL009"] != 1 {
		t.Errorf("got findings\n%s\nwant one RL005 and one RL009", lines(fs))
	}
}

// TestEngineProblems: what render refuses (EngineProblems) is what lint reports as RL004, at the
// same positions, and nothing in a clean repository; and a rule has such a problem exactly when
// the engine refuses to plan it (a sub-shard's or a gateway's share out of range included).
func TestEngineProblems(t *testing.T) {
	m, err := schema.Load("testdata/bad/RL004-exact-range")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range Lint(m) {
		if f.ID == "RL004" {
			want = append(want, f.Pos.String())
		}
	}
	var got, paths []string
	for _, p := range EngineProblems(m) {
		got = append(got, p.Pos.String())
		paths = append(paths, p.Check+" "+p.Path)
	}
	if want := "[exact-range domains.edge.rules.yearly.limits.0 exact-range domains.edge.rules.sharded.limits.0 exact-range domains.edge.rules.gatewayed.gateways]"; fmt.Sprint(paths) != want {
		t.Errorf("got problems %v, want %v", paths, want)
	}
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			_, err := engine.PlanRule(d.Name, r)
			if refused := len(inexactLimits(r)) > 0; refused != (err != nil) {
				t.Errorf("rule %s: lint refuses it: %v; the engine's plan: %v", r.Name, refused, err)
			}
		}
	}
	if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got problems at %v, want RL004's %v", got, want)
	}
	good, err := schema.Load("testdata/good")
	if err != nil {
		t.Fatal(err)
	}
	if probs := EngineProblems(good); len(probs) != 0 {
		t.Errorf("good repository: got %v, want no problems", probs)
	}
}

func TestRunToolErrors(t *testing.T) {
	if _, err := Run("testdata/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing path: got %v, want fs.ErrNotExist", err)
	}
	if _, err := Run(t.TempDir()); !errors.Is(err, schema.ErrNoPolicies) {
		t.Errorf("empty directory: got %v, want schema.ErrNoPolicies", err)
	}
}

// writeRepo writes a policy repository of n rules, spread over files of 100 rules each, and
// returns its directory. Every rule passes every check.
func writeRepo(b *testing.B, n int) string {
	dir := b.TempDir()
	header := `package policies

domains: bench: {
	sources: {
		tenant: {kind: "header", header: "x-tenant-id"}
		route: {kind: "header", header: ":path"}
		ip: {kind: "remote_address", mask: "subnet"}
	}
	defaults: {gateways: 10, lease: max: 20}
`
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			buf.Reset()
			buf.WriteString(header)
		}
		fmt.Fprintf(&buf, "\trules: r%05d: {\n\t\tmatch: [{key: \"tenant\", value: \"t%05d\"}, {key: \"route\", value: \"/v%d/*\"}]\n"+
			"\t\tlimits: [{requests: %d, window: \"1m\"}, {requests: %d, window: \"1h\"}]\n\t\tstage: {name: \"shadow\", since: \"2025-03-01\"}\n\t}\n",
			i, i/4, i%4, 10000+i, 100000+i)
		if i%100 == 99 || i == n-1 {
			buf.WriteString("}\n")
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("p%03d.cue", i/100)), buf.Bytes(), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return dir
}

// BenchmarkLint2000Rules loads and lints a generated repository of 2,000 rules.
func BenchmarkLint2000Rules(b *testing.B) {
	dir := writeRepo(b, 2000)
	b.ReportAllocs()
	for b.Loop() {
		fs, err := Run(dir)
		if err != nil {
			b.Fatal(err)
		}
		if len(fs) != 0 {
			b.Fatalf("got %d findings, want none: %s", len(fs), fs[0])
		}
	}
}

// BenchmarkLintOnly2000Rules lints the compiled model of the same repository, without loading.
func BenchmarkLintOnly2000Rules(b *testing.B) {
	m, err := schema.Load(writeRepo(b, 2000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Lint(m)
	}
}

// BenchmarkLintPolicies loads and lints the example repository.
func BenchmarkLintPolicies(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run("../policies"); err != nil {
			b.Skipf("../policies: %v", err)
		}
	}
}
