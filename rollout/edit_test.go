package rollout

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

func hold(s string) *string { return &s }

// TestApply edits testdata/edit's policy and compares the changed files with golden files: only
// the stage fields change, comments and formatting stay. The edited policy must load, with the
// stage the edit asked for.
func TestApply(t *testing.T) {
	tests := []struct {
		name string
		edit Edit
		want policy.Stage
	}{
		{"promote_inline", Edit{Rule: "inline", To: policy.StageSoft, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageSoft, Since: "2025-06-12"}},
		{"promote_multi_to_enforce", Edit{Rule: "multi", To: policy.StageEnforce, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageEnforce, Since: "2025-06-12"}},
		{"abort_inherited", Edit{Rule: "inherits", To: policy.StageShadow, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageShadow, Since: "2025-06-12"}},
		{"promote_held_to_canary", Edit{Rule: "held", To: policy.StageCanary, Percent: 5, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageCanary, CanaryPercent: 5, Since: "2025-06-12", Hold: "waiting for the partner's fix"}},
		{"pause_inline", Edit{Rule: "inline", Hold: hold(`checkout "v2" first`)},
			policy.Stage{Name: policy.StageShadow, Since: "2025-06-02", Hold: `checkout "v2" first`}},
		{"pause_multi", Edit{Rule: "multi", Hold: hold("incident 42")},
			policy.Stage{Name: policy.StageCanary, CanaryPercent: 5, Since: "2025-06-09", Hold: "incident 42"}},
		{"pause_inherited", Edit{Rule: "inherits", Hold: hold("new tenant onboarding")},
			policy.Stage{Name: policy.StageEnforce, Since: "2025-01-15", Hold: "new tenant onboarding"}},
		{"resume_held", Edit{Rule: "held", Hold: hold("")},
			policy.Stage{Name: policy.StageSoft, Since: "2025-06-01"}},
		{"promote_shorthand", Edit{Rule: "short", To: policy.StageSoft, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageSoft, Since: "2025-06-12"}},
		// A rule in CUE's dotted form has no braces to add a stage in.
		{"abort_dotted", Edit{Rule: "dotted", To: policy.StageShadow, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageShadow, Since: "2025-06-12"}},
		// A closing brace on the last field's line: the new field goes before it, on a line of
		// its own, indented as the block's fields (it went after the brace: a load error).
		{"pause_braced", Edit{Rule: "braced", Hold: hold("incident 43")},
			policy.Stage{Name: policy.StageSoft, Since: "2025-06-01", Hold: "incident 43"}},
		{"promote_name_last_to_canary", Edit{Rule: "nameLast", To: policy.StageCanary, Percent: 5, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageCanary, CanaryPercent: 5, Since: "2025-06-12"}},
		// Leaving canary removes the percent's line with its comment; the name keeps its own.
		{"promote_canary_comments", Edit{Rule: "ramp", To: policy.StageEnforce, Since: "2025-06-12"},
			policy.Stage{Name: policy.StageEnforce, Since: "2025-06-12"}},
	}
	m, err := schema.Load("testdata/edit")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ReadFiles("testdata/edit")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.edit.Domain = "shop"
			changed, err := Apply(m, files, []Edit{tt.edit})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			var paths []string
			for p := range changed {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			for _, p := range paths {
				out.WriteString("-- " + filepath.Base(p) + " --\n")
				out.Write(changed[p])
			}
			golden.Check(t, filepath.Join("testdata/edit", tt.name+".golden"), out.Bytes())

			dir := t.TempDir()
			for p, b := range files {
				if c, ok := changed[p]; ok {
					b = c
				}
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m2, err := schema.Load(dir)
			if err != nil {
				t.Fatalf("the edited policy does not load: %v", err)
			}
			got := ruleNamed(m2, "shop", tt.edit.Rule).Stage
			got.Pos = policy.Pos{}
			if got != tt.want {
				t.Errorf("stage: got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func ruleNamed(m *policy.Model, domain, rule string) *policy.Rule {
	for _, r := range m.Domain(domain).Rules {
		if r.Name == rule {
			return r
		}
	}
	return nil
}

// TestReadFilesAsLoaded: ReadFiles reads the files schema.Load reads, and not a file whose name
// starts with '_' or '.', which the loader skips: an edit there changes no rule (a promotion
// written into _old.cue reported "shadow → soft" and left the rule in shadow).
func TestReadFilesAsLoaded(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"p.cue", "_old.cue", ".hidden.cue", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("package p\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := ReadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p := range files {
		got = append(got, filepath.Base(p))
	}
	if len(got) != 1 || got[0] != "p.cue" {
		t.Errorf("got %v, want [p.cue]", got)
	}
}

// TestApplySplitStage: a stage written in two fields of a rule (stage: name: ... beside
// stage: since: ...), which CUE unifies, is refused with the rule's file and lines: an edit of
// one field left the other to conflict ("the edited policy does not load (a bug)", naming
// temporary files), and a pause wrote a second since.
func TestApplySplitStage(t *testing.T) {
	dir := t.TempDir()
	src := `package policies

domains: shop: {
	sources: plan: {kind: "header", header: "x-plan"}
	rules: free: {
		match: [{key: "plan", value: "free"}]
		limits: [{requests: 60, window: "1m"}]
		stage: name:  "shadow"
		stage: since: "2025-06-01"
	}
}
`
	path := filepath.Join(dir, "p.cue")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, files := loadFiles(t, dir)
	for _, e := range []Edit{
		{Domain: "shop", Rule: "free", To: policy.StageSoft, Since: "2025-06-12"},
		{Domain: "shop", Rule: "free", Hold: hold("incident 7")},
	} {
		_, err := Apply(m, files, []Edit{e})
		if err == nil || !strings.Contains(err.Error(), path+": the stage of rule free is written in 2 fields (lines 8 and 9)") {
			t.Errorf("edit %+v: got %v, want the split stage refused at its lines", e, err)
		}
	}
}

// TestPrepareStageFromPattern: a stage that a CUE pattern sets besides the rule's own (rules:
// [_]: stage) conflicts with the edit. Prepare says so with the policy's own files, not the
// temporary copies it loads, and does not call it a bug.
func TestPrepareStageFromPattern(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"a.cue": `package p

domains: d: {
	sources: tenant: {kind: "header", header: "x-tenant"}
	rules: r1: {
		match: [{key: "tenant"}]
		limits: [{requests: 10, window: "1s"}]
	}
}
`,
		"b.cue": `package p

domains: d: rules: [_]: stage: {name: "shadow", since: "2025-01-01"}
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, files := loadFiles(t, dir)
	_, err := Prepare(m, files, []Edit{{Domain: "d", Rule: "r1", To: policy.StageSoft, Since: "2025-02-01"}})
	if err == nil {
		t.Fatal("an edit conflicting with a pattern's stage loaded")
	}
	msg := err.Error()
	for _, want := range []string{filepath.Join(dir, "b.cue"), "a pattern such as rules: [_]: stage"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "rlctl-rollout-") || strings.Contains(msg, "a bug") {
		t.Errorf("error names the temporary copies, or calls it a bug:\n%s", msg)
	}
}

// TestBranchIsARef: rule names may hold what a Git ref may not ("..", a trailing "." or
// ".lock"); the branch is made valid, and other names are left as they are.
func TestBranchIsARef(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct{ rule, want string }{
		{"developer_pro", "rlctl/rollout/d/developer_pro"},
		{"v1.2", "rlctl/rollout/d/v1.2"},
		{"a..b", "rlctl/rollout/d/a.-.b-h"},
		{"a.-.b", "rlctl/rollout/d/a.-.b"}, // a valid name: the escaped one must differ
		{"a...b", "rlctl/rollout/d/a.-.-.b-h"},
		{"cfg.lock", "rlctl/rollout/d/cfg.lock--h"},
		{"cfg.lock-", "rlctl/rollout/d/cfg.lock-"},
		{"end.", "rlctl/rollout/d/end.--h"},
	} {
		got := Branch("d", tc.rule)
		if got != tc.want && !(strings.HasSuffix(tc.want, "-h") && strings.HasPrefix(got, tc.want) && len(got) == len(tc.want)+8) {
			t.Errorf("Branch(d, %q) = %q, want %q", tc.rule, got, tc.want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("rules %q and %q share the branch %s", other, tc.rule, got)
		}
		seen[got] = tc.rule
		if out, err := exec.Command("git", "check-ref-format", "refs/heads/"+got).CombinedOutput(); err != nil {
			t.Errorf("git check-ref-format refs/heads/%s: %v %s", got, err, out)
		}
	}
}

// loadFiles loads the policy in dir and reads its files, as rollout's edits take them.
func loadFiles(t *testing.T, dir string) (*policy.Model, Files) {
	t.Helper()
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := ReadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, files
}
