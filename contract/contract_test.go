package contract

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// TestFormatsGolden writes the matrix of the example policy repository in every format. Run
// with -update to rewrite the golden files, then review the diff.
func TestFormatsGolden(t *testing.T) {
	m, err := schema.Load(filepath.Join("..", "policies"))
	if err != nil {
		t.Fatal(err)
	}
	rows := Rows(m, Filter{})
	for _, name := range FormatNames {
		t.Run(name, func(t *testing.T) {
			f, err := ParseFormat(name)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := f(&b, rows); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "policies."+name+".golden"), b.Bytes())
		})
	}
}

func TestParseFormat(t *testing.T) {
	for _, name := range []string{"table", "text", "markdown", "json", "csv"} {
		if _, err := ParseFormat(name); err != nil {
			t.Errorf("ParseFormat(%q): got %v, want a format", name, err)
		}
	}
	if _, err := ParseFormat("yaml"); err == nil {
		t.Errorf("ParseFormat(%q): got no error, want one", "yaml")
	}
}

func TestRowsFilter(t *testing.T) {
	m := &policy.Model{Domains: []*policy.Domain{
		{Name: "a", Rules: []*policy.Rule{
			{Name: "a1", Owner: "team-x"},
			{Name: "a2", Owner: "team-y"},
		}},
		{Name: "b", Rules: []*policy.Rule{
			{Name: "b1", Owner: "team-x"},
		}},
	}}
	tests := []struct {
		f     Filter
		rules []string
		notes []string
	}{
		{Filter{}, []string{"a1", "a2", "b1"}, nil},
		{Filter{Domains: []string{"b"}}, []string{"b1"}, nil},
		{Filter{Owners: []string{"team-x"}}, []string{"a1", "b1"}, nil},
		{Filter{Domains: []string{"a"}, Owners: []string{"team-x", "team-y"}}, []string{"a1", "a2"}, nil},
		{Filter{Domains: []string{"c"}}, nil, []string{"--domain c matches no domain (domains: a, b)"}},
		{Filter{Owners: []string{"team-x", "team-z"}}, []string{"a1", "b1"},
			[]string{"--owner team-z matches no rule (owners: team-x, team-y)"}},
		{Filter{Domains: []string{"b"}, Owners: []string{"team-y"}}, nil,
			[]string{"no rule of domain b has owner team-y"}},
	}
	for i, tt := range tests {
		var got []string
		for _, r := range Rows(m, tt.f) {
			got = append(got, r.Rule)
		}
		if !reflect.DeepEqual(got, tt.rules) {
			t.Errorf("step %d: got rules %v, want %v", i, got, tt.rules)
		}
		if notes := Unmatched(m, tt.f); !reflect.DeepEqual(notes, tt.notes) {
			t.Errorf("step %d: got notes %q, want %q", i, notes, tt.notes)
		}
	}
}
