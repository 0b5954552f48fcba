package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
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
		// A sub-sharded rule takes one extra trailing entry, keyed by its attribute, and only
		// with it: the shorter descriptor is another rule's shape.
		{entries(e("tenant", "big"), e("path", "/orders")), ""},
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
		// LookupIndex names the same rule by its place in d.Rules.
		at, ok := d.LookupIndex(tt.entries)
		got = ""
		if ok {
			got = d.Rules[at].Name
		}
		if got != tt.want {
			t.Errorf("step %d: LookupIndex(%v): got %q, want %q", i, tt.entries, got, tt.want)
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

	// Exact values of several keys at one level: each entry is looked up among its key's.
	d3 := &Domain{Rules: []*Rule{
		rule("acme", exact("tenant", "acme")),
		rule("pro", exact("plan", "pro")),
		rule("plan_any", anyValue("plan")),
	}}
	for i, tt := range []struct {
		entry Entry
		want  string
	}{
		{e("tenant", "acme"), "acme"},
		{e("tenant", "pro"), ""},
		{e("plan", "pro"), "pro"},
		{e("plan", "acme"), "plan_any"},
		{e("other", "pro"), ""},
	} {
		r, ok := d3.Lookup(entries(tt.entry))
		got := ""
		if ok {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("step %d: Lookup(%v): got %q, want %q", i, tt.entry, got, tt.want)
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

// validModel returns a small model that passes Validate.
func validModel() *Model {
	r := rule("r", exact("k", "v"))
	r.Limits = []Limit{{Requests: 10, WindowMs: 1000, Burst: 10, Algorithm: TokenBucket, Cost: 1}}
	r.Stage = Stage{Name: StageEnforce}
	r.FailureMode = FailOpen
	r.StoreTimeoutMs = 5
	r.Lease = Lease{Min: 1, Max: 5, LookaheadMs: 250, TTLMs: 2000}
	return &Model{Domains: []*Domain{{
		Name:    "d",
		Sources: []*Source{{Key: "k", Kind: SourceHeader, Header: "x-k"}, {Key: "ip", Kind: SourceRemoteAddress}},
		Rules:   []*Rule{r},
	}}}
}

func TestValidate(t *testing.T) {
	at := func(line int) Pos { return Pos{File: "p.cue", Line: line, Col: 1} }
	tests := []struct {
		name  string
		edit  func(d *Domain)
		check string // the problem's Check
		want  string // a substring of its String(); "" for a valid model
		pos   Pos
	}{
		{"valid", func(d *Domain) {}, "", "", Pos{}},
		{"duplicate match", func(d *Domain) {
			r := *d.Rules[0]
			r.Name, r.Pos = "r2", at(9)
			d.Rules = append(d.Rules, &r)
		}, "duplicate-match", `domains.d.rules.r2: rule r2 has the same match as rule r (k="v")`, at(9)},
		{"unknown key falls back to the rule's position", func(d *Domain) {
			d.Rules[0].Pos = at(3)
			d.Rules[0].Match = []Match{exact("tenant", "a")}
		}, "unknown-descriptor", `match key "tenant" at level 1: no source produces it (sources: k, ip)`, at(3)},
		// Both entries are the one source's: its one value never equals "a" and "b" at once.
		{"a key at two levels", func(d *Domain) {
			d.Rules[0].Match = []Match{exact("k", "a"), exact("k", "b")}
		}, "", `domains.d.rules.r.match.1: match key "k" is at levels 1 and 2: a request gives it one value, so two different values never match; name it once`, Pos{}},
		{"unknown sub-shard attribute", func(d *Domain) {
			d.Rules[0].SubShards = &SubShards{Count: 4, Attribute: "client"}
		}, "unknown-descriptor", `sub_shards attribute "client": no source produces it`, Pos{}},
		{"lease bounds at the rule, named by its path", func(d *Domain) {
			d.Rules[0].Pos = at(4)
			d.Rules[0].Lease.Min = 50
		}, "lease-bounds", "domains.d.rules.r.lease: lease min 50 is above lease max 5", at(4)},
		{"canary without percent", func(d *Domain) { d.Rules[0].Stage = Stage{Name: StageCanary, Pos: at(6)} },
			"canary-percent", "canary stage has percent 0, want 1 to 100", at(6)},
		{"shard entry taken by a deeper rule", func(d *Domain) {
			d.Rules[0].SubShards = &SubShards{Count: 4, Attribute: "ip"}
			deeper := *d.Rules[0]
			deeper.Name, deeper.SubShards = "deeper", nil
			deeper.Match = []Match{exact("k", "v"), {Key: "ip", Kind: MatchAny, Pos: at(7)}}
			d.Rules = append(d.Rules, &deeper)
		}, "", "rule deeper matches ip below rule r, which uses it to pick a sub-shard", at(7)},
		{"zero window", func(d *Domain) { d.Rules[0].Limits[0].WindowMs = 0 }, "", "window 0ms is out of range", Pos{}},
		// The engine charges the first limit's cost to every limit: 50 against 10 a second
		// rejected every request while lint passed it.
		{"costs that differ", func(d *Domain) {
			l := d.Rules[0].Limits[0]
			l.Cost, d.Rules[0].Limits[0].Cost = 1, 50
			l.Pos = at(5)
			d.Rules[0].Limits = append(d.Rules[0].Limits, l)
		}, "", "limits.1.cost: cost 1 differs from the first limit's 50", at(5)},
		{"negative store timeout", func(d *Domain) { d.Rules[0].StoreTimeoutMs = -1 }, "", "store timeout -1ms must not be negative", Pos{}},
		{"negative lease ttl", func(d *Domain) { d.Rules[0].Lease.TTLMs = -1 }, "", "ttl -1ms must not be negative", Pos{}},
		// Zero timings are the engine's defaults (and the enforcer's own store timeout).
		{"zero timings", func(d *Domain) {
			d.Rules[0].StoreTimeoutMs, d.Rules[0].Lease = 0, Lease{}
		}, "", "", Pos{}},
		{"wildcard kind without a star", func(d *Domain) { d.Rules[0].Match[0].Kind = MatchWildcard }, "", `kind "wildcard"`, Pos{}},
		// Render read the first source's payload for the identity waterfall and the bootstrap,
		// so the second source never had a value in Envoy, while the model read both from one.
		{"two JWT payloads", func(d *Domain) {
			d.Sources = append(d.Sources,
				&Source{Key: "plan", Kind: SourceJWTClaim, Claim: "plan", MetadataNamespace: "envoy.filters.http.jwt_authn", MetadataKey: "jwt_payload"},
				&Source{Key: "org", Kind: SourceJWTClaim, Claim: "org", MetadataNamespace: "envoy.filters.http.jwt_authn", MetadataKey: "other", Pos: at(7)})
		}, "", `source "org" reads the JWT payload at envoy.filters.http.jwt_authn/other, and source "plan" at envoy.filters.http.jwt_authn/jwt_payload`, at(7)},
		{"quoted labels", func(d *Domain) {
			d.Name = "a.b"
			d.Rules[0].Name = "tier-1"
			d.Rules[0].FailureMode = ""
		}, "", `domains."a.b".rules."tier-1".failure.mode: unknown failure mode ""`, Pos{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel()
			tt.edit(m.Domains[0])
			probs := m.Validate()
			if tt.want == "" {
				if len(probs) != 0 {
					t.Fatalf("got %v, want no problems", probs)
				}
				return
			}
			if len(probs) != 1 {
				t.Fatalf("got %d problems, want 1:\n%v", len(probs), probs)
			}
			p := probs[0]
			if !strings.Contains(p.String(), tt.want) || p.Check != tt.check || p.Pos != tt.pos {
				t.Errorf("got %q check %q at %s, want %q check %q at %s", p, p.Check, p.Pos, tt.want, tt.check, tt.pos)
			}
		})
	}
}

func TestMatchKey(t *testing.T) {
	a := []Match{exact("k", "v"), anyValue("ip")}
	if MatchKey(a) != MatchKey([]Match{exact("k", "v"), {Key: "ip", Kind: MatchAny, Pos: Pos{File: "x"}}}) {
		t.Error("MatchKey: got different keys for the same match at different positions")
	}
	if !strings.HasPrefix(MatchKey(a), MatchKey(a[:1])) {
		t.Error("MatchKey: got a key that does not start with its parent's")
	}
	// Quoting keeps entries apart: k="a;b" is not k="a" followed by more.
	distinct := [][]Match{
		{exact("k", "v")}, {wild("k", "v*")}, {anyValue("k")}, {exact("k", `a";"b`)},
		{exact("k", "a"), exact("b", "")}, {exact("k_v", "")}, {exact("k", "v"), anyValue("ip")},
	}
	seen := map[string]int{}
	for i, ms := range distinct {
		k := MatchKey(ms)
		if j, ok := seen[k]; ok {
			t.Errorf("MatchKey: cases %d and %d both give %q", j, i, k)
		}
		seen[k] = i
	}
}

func TestShadowed(t *testing.T) {
	rules := []*Rule{
		rule("ent", wild("tenant", "e*")),
		rule("ent2", wild("tenant", "ent-*")),   // shadowed by e*
		rule("acme", exact("tenant", "acme")),   // exact: never shadowed
		rule("all", wild("tenant", "*")),        // after e*, but broader: reachable
		rule("anon", anyValue("tenant")),        // shadowed by *
		rule("ent_again", wild("tenant", "e*")), // a duplicate, not a shadow
		rule("gold_a", exact("plan", "gold"), wild("ip", "10.*")),
		rule("gold_b", exact("plan", "gold"), wild("ip", "10.1*")), // shadowed at level 2
		rule("user", wild("user", "e*")),                           // another key: reachable
	}
	d := &Domain{Rules: rules}
	var got []string
	for _, s := range d.Shadowed() {
		got = append(got, fmt.Sprintf("%s@%d by %s", s.Rule.Name, s.Level, s.By.Name))
	}
	want := []string{"ent2@0 by ent", "anon@0 by all", "gold_b@1 by gold_a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Of two rules with the same match, Lookup selects the first (Validate reports the second), and
// LookupIndex names its place, not the second's.
func TestLookupIndexOfDuplicateMatch(t *testing.T) {
	d := &Domain{Rules: []*Rule{
		rule("other", exact("tenant", "zed")),
		rule("first", exact("tenant", "acme")),
		rule("again", exact("tenant", "acme")),
	}}
	at, ok := d.LookupIndex(entries(e("tenant", "acme")))
	if !ok || at != 1 {
		t.Fatalf("LookupIndex: got %d, %v; want 1, true", at, ok)
	}
	if r, _ := d.Lookup(entries(e("tenant", "acme"))); r != d.Rules[1] {
		t.Errorf("Lookup: got %v, want rule first", r)
	}
}

// Compile gives the tree's keys the strings of the domain's sources, so that an entry built from
// a source compares with a node's key by pointer; a key no source has stays as the rule wrote it.
func TestCompileInternsSourceKeys(t *testing.T) {
	src := func(k string) *Source { return &Source{Key: strings.Clone(k), Kind: SourceHeader, Header: "x-" + k} }
	d := &Domain{Name: "edge", Sources: []*Source{src("tenant"), src("path"), src("plan")},
		Rules: []*Rule{
			rule("a", exact(strings.Clone("tenant"), "acme"), wild(strings.Clone("path"), "/v1/*")),
			rule("b", anyValue(strings.Clone("plan"))),
			rule("c", anyValue(strings.Clone("orphan"))),
		}}
	d.Compile()
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	root := d.matcher.root
	x := root.exact[0]
	if !same(x.key, d.Sources[0].Key) {
		t.Errorf("exact child key %q is not the source's string", x.key)
	}
	if w := x.byValue["acme"].wildcards[0]; !same(w.key, d.Sources[1].Key) {
		t.Errorf("wildcard child key %q is not the source's string", w.key)
	}
	if a := root.any[0]; !same(a.key, d.Sources[2].Key) {
		t.Errorf("key-only child key %q is not the source's string", a.key)
	}
	if a := root.any[1]; a.key != "orphan" {
		t.Errorf("a key without a source: got %q", a.key)
	}
	if r, ok := d.Lookup([]Entry{{Key: d.Sources[0].Key, Value: "acme"}, {Key: "path", Value: "/v1/x"}}); !ok || r.Name != "a" {
		t.Errorf("lookup after interning: got %v, %v", r, ok)
	}
}

// TestLookupWildcardAsWritten: a value that is a wildcard's value as written, '*' included,
// selects that wildcard's rule before any other wildcard is tried, as envoyproxy/ratelimit
// looks KEY_VALUE up among all values as written first: "/v1/orders*" sent is the second rule's,
// not the first wildcard's that its prefix "/v1/" starts.
func TestLookupWildcardAsWritten(t *testing.T) {
	d := &Domain{Name: "d", Rules: []*Rule{
		rule("v1", wild("path", "/v1/*")),
		rule("orders", wild("path", "/v1/orders*")),
	}}
	for _, tt := range []struct{ value, want string }{
		{"/v1/orders*", "orders"},
		{"/v1/orders/1", "v1"},
		{"/v1/*", "v1"},
	} {
		got := ""
		if r, ok := d.Lookup(entries(e("path", tt.value))); ok {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("path=%s: got rule %q, want %q", tt.value, got, tt.want)
		}
	}
	sel := d.NewSelector([]string{"path"}, [][]int{{0}})
	for _, v := range []string{"/v1/orders*", "/v1/orders/1"} {
		c := []uint32{sel.Class(0, v)}
		es := entries(e("path", v))
		got, found := sel.Learn(0, c, es)
		if want, wantFound := d.LookupIndex(es); got != want || found != wantFound {
			t.Errorf("selector on %s: got %d %v, Lookup %d %v", v, got, found, want, wantFound)
		}
	}
}
