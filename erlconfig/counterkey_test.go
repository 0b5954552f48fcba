package erlconfig

import (
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// TestCounterClashes: the clashes found are real, two different descriptors, each selected by
// its rule's matches, whose counter texts as ERL builds them (GenerateCacheKey: key_value_ for
// each entry) are one; and lists that cannot meet give none.
func TestCounterClashes(t *testing.T) {
	any := func(k string) policy.Match { return policy.Match{Key: k, Kind: policy.MatchAny} }
	exact := func(k, v string) policy.Match { return policy.Match{Key: k, Value: v, Kind: policy.MatchExact} }
	wild := func(k, v string) policy.Match { return policy.Match{Key: k, Value: v, Kind: policy.MatchWildcard} }
	text := func(ms []policy.Match, vs []string) string {
		var b strings.Builder
		for i, m := range ms {
			b.WriteString(m.Key + "_" + vs[i] + "_")
		}
		return b.String()
	}
	matches := func(m policy.Match, v string) bool {
		switch m.Kind {
		case policy.MatchExact:
			return v == m.Value
		case policy.MatchWildcard:
			return strings.HasPrefix(v, strings.TrimSuffix(m.Value, "*"))
		}
		return true
	}
	for _, tc := range []struct {
		name  string
		lists [][]policy.Match
		want  int
	}{
		{"a key, then it and another", [][]policy.Match{{any("user")}, {any("user"), exact("path", "x")}}, 1},
		{"and both of the second the client's", [][]policy.Match{{any("user")}, {any("user"), any("path")}}, 2},
		{"two values the client's", [][]policy.Match{{any("user"), any("path")}}, 1},
		{"a wildcard before a value", [][]policy.Match{{wild("path", "/v1/*"), any("user")}}, 1},
		{"one key the start of another", [][]policy.Match{{any("user")}, {any("user_id")}}, 1},
		{"an exact value and the key's others", [][]policy.Match{{exact("user", "vip")}, {any("user")}}, 0},
		{"one value the client's", [][]policy.Match{{exact("plan", "pro"), any("user")}}, 0},
		{"keys apart", [][]policy.Match{{exact("tenant", "x")}, {any("tier")}}, 0},
		{"exact values apart", [][]policy.Match{{exact("plan", "pro"), any("user")}, {exact("tier", "gold"), any("user")}}, 0},
	} {
		got := counterClashes(tc.lists)
		if len(got) != tc.want {
			t.Errorf("%s: %d clashes %+v, want %d", tc.name, len(got), got, tc.want)
			continue
		}
		for _, c := range got {
			li, lj := tc.lists[c.i], tc.lists[c.j]
			for k, m := range li {
				if !matches(m, c.a[k]) {
					t.Errorf("%s: value %q is not %s's", tc.name, c.a[k], m)
				}
			}
			for k, m := range lj {
				if !matches(m, c.b[k]) {
					t.Errorf("%s: value %q is not %s's", tc.name, c.b[k], m)
				}
			}
			ta, tb := text(li, c.a), text(lj, c.b)
			if ta != tb || (c.i == c.j && strings.Join(c.a, "\x00") == strings.Join(c.b, "\x00")) {
				t.Errorf("%s: %s and %s: counter texts %q and %q, want one text of two descriptors",
					tc.name, entriesText(li, c.a), entriesText(lj, c.b), ta, tb)
			}
		}
	}
}

// TestCounterClashesFixedValues: an entry whose source gives one value (path_match,
// generic_key) is that value in the render's search, not one the client chooses: a tenant with
// a path_match endpoint has one free span and no clash, while the same rule on a header of the
// path has two. The render reported clashes that needed "a_catalog_a" as a path_match's value.
func TestCounterClashesFixedValues(t *testing.T) {
	count := func(pathSource *policy.Source) int {
		d := &policy.Domain{Name: "d", Sources: []*policy.Source{
			{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant"}, pathSource}}
		d.Rules = []*policy.Rule{{Name: "r", Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}, {Key: "page", Kind: policy.MatchAny}},
			Limits: []policy.Limit{{Requests: 1, WindowMs: 1000, Algorithm: policy.FixedWindow, Cost: 1}}, FailureMode: policy.FailOpen}}
		_, notes := FromModel(&policy.Model{Domains: []*policy.Domain{d}})
		n := 0
		for _, note := range notes {
			if strings.Contains(note.Message, "in one Redis key") {
				n++
			}
		}
		return n
	}
	if n := count(&policy.Source{Key: "page", Kind: policy.SourcePathMatch, PathPrefix: "/catalog/", Value: "/catalog/"}); n != 0 {
		t.Errorf("a path_match entry: %d clashes, want none", n)
	}
	if n := count(&policy.Source{Key: "page", Kind: policy.SourceHeader, Header: ":path"}); n != 1 {
		t.Errorf("a header entry: %d clashes, want 1", n)
	}
}
