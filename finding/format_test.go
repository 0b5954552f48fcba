package finding

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
)

// sampleReport has findings out of order, one without a position and messages and paths that
// need escaping.
func sampleReport() *Report {
	r := &Report{
		Rules: []Rule{
			{ID: "RL001", Name: "dup", Severity: Error, Summary: "Duplicate.", Help: "Long help.", HelpURI: "https://example.com/RL001"},
			{ID: "RL002", Name: "warn", Severity: Warning, Summary: "Warn."},
		},
		Findings: []Finding{
			{ID: "RL002", Severity: Warning, Pos: policy.Pos{File: "policies/b.cue", Line: 3, Col: 5}, Domain: "edge", Rule: "r2",
				Message: "100% over, a: b\nsecond line\r"},
			{ID: "RL001", Severity: Error, Pos: policy.Pos{File: "policies/a,b:c.cue", Line: 12, Col: 1}, Domain: "edge", Rule: "r1",
				Message: `rule "r1": duplicate match tenant="acme"`},
			{ID: "RL000", Severity: Error, Message: "no position"},
			{ID: "RL001", Severity: Error, Pos: policy.Pos{File: "policies/a,b:c.cue", Line: 2, Col: 7}, Message: "earlier line"},
		},
	}
	Sort(r.Findings)
	return r
}

func TestFormatsGolden(t *testing.T) {
	for _, name := range FormatNames {
		t.Run(name, func(t *testing.T) {
			f, err := ParseFormat(name)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := f.Write(&buf, sampleReport()); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "report."+name), buf.Bytes())
		})
	}
}

func TestParseFormatUnknown(t *testing.T) {
	if _, err := ParseFormat("yaml"); err == nil || !strings.Contains(err.Error(), `unknown output format "yaml" (want text, json, github, sarif)`) {
		t.Errorf("got %v, want an unknown format error", err)
	}
}

func TestSort(t *testing.T) {
	r := sampleReport()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Pos.String())
	}
	want := []string{"", "policies/a,b:c.cue:2:7", "policies/a,b:c.cue:12:1", "policies/b.cue:3:5"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got order %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		r    *Report
		want string
	}{
		{&Report{}, "0 errors, 0 warnings"},
		{sampleReport(), "3 errors, 1 warning"},
		{&Report{Findings: []Finding{{Severity: Error}}}, "1 error, 0 warnings"},
	}
	for _, tt := range tests {
		if got := tt.r.Summary().String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestGitHubEscaping(t *testing.T) {
	var buf bytes.Buffer
	if err := (GitHub{}).Write(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	tests := []string{
		"::error title=RL000::no position\n",
		"::error file=policies/a%2Cb%3Ac.cue,line=2,col=7,title=RL001::earlier line\n",
		"::warning file=policies/b.cue,line=3,col=5,title=RL002::100%25 over, a: b%0Asecond line%0D\n",
	}
	for _, want := range tests {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("got\n%s\nwant it to contain %q", buf.String(), want)
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Errorf("got %d lines, want 4 (one per finding)", n)
	}
}

// TestSARIFShape checks the parts of SARIF 2.1.0 that consumers (GitHub code scanning) require.
func TestSARIFShape(t *testing.T) {
	var buf bytes.Buffer
	if err := (SARIF{}).Write(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Schema  string `json:"$schema"`
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID               string            `json:"id"`
						ShortDescription map[string]string `json:"shortDescription"`
						FullDescription  map[string]string `json:"fullDescription"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string            `json:"ruleId"`
				RuleIndex *int              `json:"ruleIndex"`
				Level     string            `json:"level"`
				Message   map[string]string `json:"message"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine   int `json:"startLine"`
							StartColumn int `json:"startColumn"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(buf.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || log.Schema != SARIFSchema || len(log.Runs) != 1 {
		t.Fatalf("got version %q schema %q %d runs, want 2.1.0, %s, 1 run", log.Version, log.Schema, len(log.Runs), SARIFSchema)
	}
	run := log.Runs[0]
	if run.Tool.Driver.Name != "rlctl" || len(run.Tool.Driver.Rules) != 2 {
		t.Fatalf("got driver %q with %d rules, want rlctl with 2", run.Tool.Driver.Name, len(run.Tool.Driver.Rules))
	}
	for _, r := range run.Tool.Driver.Rules {
		if r.ShortDescription["text"] == "" || r.FullDescription["text"] == "" {
			t.Errorf("rule %s: got empty descriptions", r.ID)
		}
	}
	if len(run.Results) != 4 {
		t.Fatalf("got %d results, want 4", len(run.Results))
	}
	res := run.Results[1]
	loc := res.Locations[0].PhysicalLocation
	if res.RuleID != "RL001" || res.RuleIndex == nil || *res.RuleIndex != 0 || res.Level != "error" ||
		loc.ArtifactLocation.URI != "policies/a,b:c.cue" || loc.Region.StartLine != 2 || loc.Region.StartColumn != 7 {
		t.Errorf("got result %+v at %+v, want RL001 (index 0) error at policies/a,b:c.cue 2:7", res, loc)
	}
	if run.Results[0].RuleIndex != nil || len(run.Results[0].Locations) != 0 {
		t.Errorf("got RL000 result with rule index or location, want neither (not in the rules, no position)")
	}
}

func TestFileURI(t *testing.T) {
	tests := []struct{ path, want string }{
		{"policies/a.cue", "policies/a.cue"},
		{"my policies/a b.cue", "my%20policies/a%20b.cue"},
		{"/abs/p.cue", "file:///abs/p.cue"},
	}
	for _, tt := range tests {
		if got := fileURI(tt.path); got != tt.want {
			t.Errorf("fileURI(%q): got %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, JSON{}, sampleReport()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(got) || !bytes.Contains(got, []byte(`"errors": 3`)) {
		t.Errorf("got %s, want the JSON report", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("got %d files in the directory, want 1 (no temporary left)", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "out.json"), JSON{}, sampleReport()); err == nil {
		t.Errorf("got no error writing into a missing directory, want one")
	}
}

func TestJSONEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := (JSON{}).Write(&buf, &Report{}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"findings\": [],\n  \"summary\": {\n    \"errors\": 0,\n    \"warnings\": 0\n  }\n}\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}
