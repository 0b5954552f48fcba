package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// load loads a testdata policy, failing the test when it does not load.
func load(t *testing.T, dir string) *policy.Model {
	t.Helper()
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatalf("loading %s: %v", dir, err)
	}
	return m
}

// The three forms of the golden change list, base → head.
func TestGolden(t *testing.T) {
	cs := Compare(load(t, "testdata/base"), load(t, "testdata/head"))
	for _, f := range []struct {
		name  string
		write func(*bytes.Buffer, []Change) error
	}{
		{"changes.txt", func(b *bytes.Buffer, cs []Change) error { return WriteText(b, cs) }},
		{"changes.json", func(b *bytes.Buffer, cs []Change) error { return WriteJSON(b, cs) }},
		{"changes.md", func(b *bytes.Buffer, cs []Change) error { return WriteMarkdown(b, cs) }},
	} {
		var b bytes.Buffer
		if err := f.write(&b, cs); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		golden.Check(t, "testdata/golden/"+f.name, b.Bytes())
	}
}

// Without changes, each form says so and JSON still has its fields.
func TestNoChanges(t *testing.T) {
	m := load(t, "testdata/base")
	cs := Compare(m, load(t, "testdata/base"))
	if len(cs) != 0 {
		t.Fatalf("a policy against itself: got %d changes, want none: %s", len(cs), summarize(cs))
	}
	var b bytes.Buffer
	if err := WriteText(&b, cs); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "No changes.\n"; got != want {
		t.Errorf("text: got %q, want %q", got, want)
	}
	b.Reset()
	if err := WriteJSON(&b, cs); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if got, ok := doc["changes"].([]any); !ok || len(got) != 0 {
		t.Errorf("json: got changes %v, want []", doc["changes"])
	}
	b.Reset()
	if err := WriteMarkdown(&b, cs); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "### rlctl diff: no changes\n"; got != want {
		t.Errorf("markdown: got %q, want %q", got, want)
	}
}

// A change list too long for one comment stays under GitHub's limit, folded, and says what it
// left out.
func TestMarkdownLimit(t *testing.T) {
	var cs []Change
	for i := range 3000 {
		cs = append(cs, Change{Domain: "d", Rule: "r", Kind: KindOwner, Summary: strings.Repeat("x", 40) + string(rune('a'+i%26)),
			Base: policy.Pos{File: "policies/some/long/path.cue", Line: i}, Head: policy.Pos{File: "policies/some/long/path.cue", Line: i}})
	}
	extra := Section{Title: "Gates", Markdown: strings.Repeat("evidence line\n", 5000)}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, cs, WithSection(extra)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if len(out) >= MarkdownLimit {
		t.Errorf("got %d bytes, want fewer than %d", len(out), MarkdownLimit)
	}
	for _, want := range []string{"<details><summary>3000 changes</summary>", "more changes not shown", "#### Gates", "cut to fit"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Count(out, "<details>") != strings.Count(out, "</details>") {
		t.Errorf("got %d <details> and %d </details>", strings.Count(out, "<details>"), strings.Count(out, "</details>"))
	}
}

// TestMarkdownLimitKeepsWhatAdmits: two thousand store timeouts of a changed default, then a
// limit tightened in the next domain. The tightening is shown, the timeouts as room allows; it
// was left out, counted among the changes not shown.
func TestMarkdownLimitKeepsWhatAdmits(t *testing.T) {
	var cs []Change
	for i := range 2000 {
		cs = append(cs, Change{Domain: "d", Rule: fmt.Sprintf("r%d", i), Kind: KindStoreTimeout,
			Summary: fmt.Sprintf("r%d: store timeout 5ms → 4ms", i), Head: policy.Pos{File: "p/a.cue", Line: i + 10}})
	}
	cs = append(cs, Change{Domain: "e", Rule: "z", Kind: KindLimitTightened, Summary: "z: 10/s → 5/s (−50%)",
		Head: policy.Pos{File: "p/b.cue", Line: 3}})
	var b bytes.Buffer
	if err := WriteMarkdown(&b, cs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"z: 10/s → 5/s", "`limit_tightened`", "more changes not shown", "r0: store timeout"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Index(out, "`d`") > strings.Index(out, "`e`") {
		t.Error("the domains are not in their order")
	}
}

// Markdown escapes what a policy's values may hold.
func TestMarkdownEscape(t *testing.T) {
	cs := []Change{{Domain: "d", Rule: "r", Kind: KindMatch, Summary: "r: match path=/a|b/* → <x>_y_"}}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, cs); err != nil {
		t.Fatal(err)
	}
	if want := `r: match path=/a\|b/\* → &lt;x&gt;\_y\_`; !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant it to contain %s", b.String(), want)
	}
}
