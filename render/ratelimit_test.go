package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/erlconfig/erltest"
	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/schema"
)

// renderExample renders the example policy repository with the ratelimit target.
func renderExample(t *testing.T, o Options) Result {
	t.Helper()
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ratelimitTarget.Render(m, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRatelimitGolden renders policies/ in both formats, and the findings, against golden files.
// Run with -update to rewrite them.
func TestRatelimitGolden(t *testing.T) {
	for _, format := range ratelimitTarget.Formats {
		t.Run(format, func(t *testing.T) {
			res := renderExample(t, Options{Format: format})
			if len(res.Files) != 1 {
				t.Fatalf("got %d files, want 1 (one domain)", len(res.Files))
			}
			f := res.Files[0]
			if want := "edge_gateway_limits." + format; f.Name != want {
				t.Errorf("file name: got %s, want %s", f.Name, want)
			}
			golden.Check(t, filepath.Join("testdata", "ratelimit", f.Name), f.Data)

			var buf bytes.Buffer
			for _, fd := range res.Findings {
				buf.WriteString(fd.String() + "\n")
			}
			golden.Check(t, filepath.Join("testdata", "ratelimit", "findings.txt"), buf.Bytes())
		})
	}
}

// TestRatelimitDeterministic renders twice and wants identical bytes.
func TestRatelimitDeterministic(t *testing.T) {
	a, b := renderExample(t, Options{}), renderExample(t, Options{})
	for i := range a.Files {
		if !bytes.Equal(a.Files[i].Data, b.Files[i].Data) {
			t.Fatalf("%s: two renders differ", a.Files[i].Name)
		}
	}
}

// TestRatelimitExactRule checks that the example repository keeps a rule that renders exactly:
// subnet_flood_guard (fixed_window, one whole minute, enforce) has no finding.
func TestRatelimitExactRule(t *testing.T) {
	res := renderExample(t, Options{})
	for _, f := range res.Findings {
		if f.Rule == "subnet_flood_guard" {
			t.Errorf("got finding %q for subnet_flood_guard, want none", f)
		}
	}
	if !bytes.Contains(res.Files[0].Data, []byte("name: subnet_flood_guard")) {
		t.Error("subnet_flood_guard is not rendered")
	}
}

// TestRatelimitStrict: the example approximates, so --strict is ErrStrict with the findings.
func TestRatelimitStrict(t *testing.T) {
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ratelimitTarget.Render(m, Options{Strict: true})
	if err != ErrStrict {
		t.Fatalf("got %v, want ErrStrict", err)
	}
	if len(res.Findings) == 0 {
		t.Error("got no findings with ErrStrict")
	}
}

// TestRatelimitLoadsInERL loads the rendered example, in both formats, with envoyproxy/ratelimit's
// own loader (its config_check_cmd).
func TestRatelimitLoadsInERL(t *testing.T) {
	for _, format := range ratelimitTarget.Formats {
		t.Run(format, func(t *testing.T) {
			res := renderExample(t, Options{Format: format})
			dir := t.TempDir()
			if err := WriteDir(dir, res.Files); err != nil {
				t.Fatal(err)
			}
			if out, err := erltest.Check(t, dir); err != nil {
				t.Fatalf("config_check_cmd refused the rendered config: %v\n%s", err, out)
			}
		})
	}
}

// TestERLLoaderRejects makes sure the loader check can fail: envoyproxy/ratelimit refuses a
// duplicate descriptor, an unknown key, an unlimited limit with a unit, and a domain given twice.
func TestERLLoaderRejects(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		files      map[string]string
	}{
		{"duplicate descriptor", "duplicate descriptor composite key", map[string]string{"d.yaml": `domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 2}
`}},
		{"unknown key", "unknown key 'bogus'", map[string]string{"d.yaml": `domain: d
descriptors:
  - key: tenant
    bogus: true
`}},
		{"unlimited with unit", "should not specify rate limit unit when unlimited", map[string]string{"d.yaml": `domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: second, unlimited: true}
`}},
		{"duplicate domain", "duplicate domain 'd'", map[string]string{
			"a.yaml": "domain: d\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
			"b.yaml": "domain: d\ndescriptors: [{key: b, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, err := erltest.Check(t, dir)
			if err == nil {
				t.Fatalf("config_check_cmd accepted it:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("got output\n%s\nwant it to contain %q", out, tc.want)
			}
		})
	}
}

// TestRatelimitJSONFindings: findings marshal with the target's name.
func TestRatelimitJSONFindings(t *testing.T) {
	res := renderExample(t, Options{Format: "json"})
	b, err := json.Marshal(res.Findings)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"target":"ratelimit"`)) {
		t.Errorf("got %s, want findings of target ratelimit", b)
	}
}
