package policy

import (
	"testing"
)

func rule(name string, match ...Match) *Rule { return &Rule{Name: name, Match: match} }

func exact(k, v string) Match     { return Match{Key: k, Value: v, Kind: MatchExact} }
func wild(k, v string) Match      { return Match{Key: k, Value: v, Kind: MatchWildcard} }
func anyValue(k string) Match     { return Match{Key: k, Kind: MatchAny} }
func e(k, v string) Entry         { return Entry{Key: k, Value: v} }
func entries(es ...Entry) []Entry { return es }

func testDomain() *Domain {
	sharded := rule("hot", exact("tenant", "big"), exact("path", "/orders"))
	sharded.SubShards = &SubShards{Count: 16, Attribute: "ip"}
	rules := []*Rule{
		rule("tenant_any", anyValue("tenant")),
		rule("acme", exact("tenant", "acme")),
		rule("acme_pay", exact("tenant", "acme"), exact("path", "/pay")),
		rule("any_catalog", anyValue("tenant"), wild("path", "/catalog/*")),
		rule("any_cat", anyValue("tenant"), wild("path", "/cat*")),
		rule("any_path", anyValue("tenant"), anyValue("path")),
		rule("everything", wild("tenant", "*")),
		sharded,
	}
	SortRules(rules)
	return &Domain{Name: "d", Rules: rules}
}

func TestLookup(t *testing.T) {
	d := testDomain()
	tests := []struct {
		entries []Entry
		want    string // "" for no match
	}{
		{entries(e("tenant", "acme")), "acme"},
		{entries(e("tenant", "acme"), e("path", "/pay")), "acme_pay"},
		// No backtracking: the exact child acme was taken, and it has no child for /catalog.
		{entries(e("tenant", "acme"), e("path", "/catalog/x")), ""},
		// A wildcard "*" beats key only at the same level.
		{entries(e("tenant", "zed")), "everything"},
		{entries(e("tenant", "zed"), e("path", "/catalog/x")), ""},
		{entries(e("tenant", "")), "everything"},
		// Depth must match.
		{entries(e("tenant", "acme"), e("path", "/pay"), e("x", "y")), ""},
		{entries(), ""},
		{entries(e("other", "acme")), ""},
		// A sub-sharded rule takes one extra trailing entry, keyed by its attribute.
		{entries(e("tenant", "big"), e("path", "/orders")), "hot"},
		{entries(e("tenant", "big"), e("path", "/orders"), e("ip", "10.0.0.1")), "hot"},
		{entries(e("tenant", "big"), e("path", "/orders"), e("other", "10.0.0.1")), ""},
		{entries(e("tenant", "big"), e("path", "/orders"), e("ip", "1"), e("ip", "2")), ""},
	}
	for i, tt := range tests {
		r, ok := d.Lookup(tt.entries)
		got := ""
		if ok {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("step %d: Lookup(%v): got %q, want %q", i, tt.entries, got, tt.want)
		}
	}

	// Wildcards are tried in declared order, before key only.
	d2 := &Domain{Rules: []*Rule{
		rule("any_catalog", anyValue("tenant"), wild("path", "/catalog/*")),
		rule("any_cat", anyValue("tenant"), wild("path", "/cat*")),
		rule("any_path", anyValue("tenant"), anyValue("path")),
	}}
	for i, tt := range []struct {
		path, want string
	}{
		{"/catalog/shoes", "any_catalog"},
		{"/cats", "any_cat"},
		{"/dogs", "any_path"},
	} {
		r, ok := d2.Lookup(entries(e("tenant", "t"), e("path", tt.path)))
		if !ok || r.Name != tt.want {
			t.Errorf("step %d: path %s: got %v, %v; want %s", i, tt.path, r, ok, tt.want)
		}
	}
}

func TestSortRules(t *testing.T) {
	d := testDomain()
	var got []string
	for _, r := range d.Rules {
		got = append(got, r.Name)
	}
	want := []string{"acme", "acme_pay", "hot", "everything", "tenant_any", "any_catalog", "any_cat", "any_path"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	d := testDomain()
	d.Compile()
	cases := [][]Entry{
		entries(e("tenant", "acme"), e("path", "/pay")),
		entries(e("tenant", "zed")),
		entries(e("tenant", "big"), e("path", "/orders"), e("ip", "10.0.0.1")),
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := d.Lookup(cases[i%len(cases)]); !ok {
			b.Fatal("no match")
		}
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	d := testDomain()
	es := entries(e("tenant", "zed"), e("path", "/catalog/x"))
	hit := entries(e("tenant", "acme"), e("path", "/pay"))
	if n := testing.AllocsPerRun(100, func() { d.Lookup(es); d.Lookup(hit) }); n != 0 {
		t.Errorf("Lookup: got %v allocations, want 0", n)
	}
}
