package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSelectorMatchesLookup checks a Selector against LookupIndex, its oracle, on random
// domains: exact, wildcard and key-only matches over a few keys, with values that share
// prefixes, rules that shadow one another, sub-sharded rules, and shapes no rule has.
func TestSelectorMatchesLookup(t *testing.T) {
	keys := []string{"a", "b", "c", "ip"}
	values := []string{"", "x", "xy", "xyz", "y", "yx", "/cat", "/catalog/1", "/catalog", "api_key:1", "api_key:", "z"}
	prefixes := []string{"", "x", "xy", "y", "/cat", "/catalog/", "api_key:"}
	rng := rand.New(rand.NewPCG(1, 2))
	var known, learnt int
	for round := 0; round < 300; round++ {
		var rules []*Rule
		for i, n := 0, 1+rng.IntN(12); i < n; i++ {
			var match []Match
			for level, depth := 0, 1+rng.IntN(3); level < depth; level++ {
				k := keys[rng.IntN(3)]
				switch rng.IntN(3) {
				case 0:
					match = append(match, exact(k, values[rng.IntN(len(values))]))
				case 1:
					match = append(match, wild(k, prefixes[rng.IntN(len(prefixes))]+"*"))
				default:
					match = append(match, anyValue(k))
				}
			}
			r := rule(fmt.Sprintf("r%d", i), match...)
			if rng.IntN(5) == 0 {
				r.SubShards = &SubShards{Count: 4, Attribute: "ip"}
			}
			rules = append(rules, r)
		}
		if round%10 == 0 { // enough exact values of one key to find them in a map
			for i := 0; i <= maxExactCompared; i++ {
				rules = append(rules, rule(fmt.Sprintf("many%d", i), exact("a", fmt.Sprintf("v%d", i)), anyValue("b")))
			}
		}
		SortRules(rules)
		d := &Domain{Name: "d", Rules: rules}

		// The rules' own shapes, and a few no rule has.
		index := map[string]int{}
		for i, k := range keys {
			index[k] = i
		}
		shapes := [][]int{{0}, {1, 0}, {0, 1, 2}, {0, 3}, {0, 1, 3}}
		for _, r := range rules {
			var shape []int
			for _, m := range r.Match {
				shape = append(shape, index[m.Key])
			}
			if sharded(r) {
				shape = append(shape, index["ip"])
			}
			shapes = append(shapes, shape)
		}
		sel := d.NewSelector(keys, shapes)

		classes := make([]uint32, len(keys))
		vals := make([]string, len(keys))
		for req := 0; req < 200; req++ {
			for k := range keys {
				vals[k] = values[rng.IntN(len(values))]
				if rng.IntN(4) == 0 {
					vals[k] = prefixes[rng.IntN(len(prefixes))] + values[rng.IntN(len(values))]
				}
				if round%10 == 0 && k == 0 && rng.IntN(2) == 0 {
					vals[k] = fmt.Sprintf("v%d", rng.IntN(maxExactCompared+3))
				}
				classes[k] = sel.Class(k, vals[k])
			}
			for si, shape := range shapes {
				es := make([]Entry, len(shape))
				for j, k := range shape {
					es[j] = Entry{Key: keys[k], Value: vals[k]}
				}
				wantRule, wantFound := d.LookupIndex(es)
				rule, found, ok := sel.Select(si, classes)
				if ok {
					known++
				} else {
					learnt++
					rule, found = sel.Learn(si, classes, es)
				}
				if found != wantFound || (found && rule != wantRule) {
					var ms []string
					for _, r := range rules {
						ms = append(ms, fmt.Sprintf("%s %v sub=%v", r.Name, r.Match, r.SubShards))
					}
					t.Fatalf("round %d: %v (known %v): got %d %v, want %d %v\nrules:\n%s",
						round, es, ok, rule, found, wantRule, wantFound, strings.Join(ms, "\n"))
				}
			}
		}
	}
	// Most answers must come from the tables, or this tested only LookupIndex.
	if known < 4*learnt {
		t.Errorf("%d answers from the tables, %d learnt: want most from the tables", known, learnt)
	}
}

// TestSelectorWithoutTable checks that a shape whose key is tested by too many prefixes has no
// table, and is still looked up right.
func TestSelectorWithoutTable(t *testing.T) {
	var rules []*Rule
	for i := 0; i <= maxSelectorPrefixes; i++ {
		rules = append(rules, rule(fmt.Sprintf("p%d", i), wild("a", fmt.Sprintf("p%02d*", i))))
	}
	rules = append(rules, rule("b", exact("b", "x")))
	SortRules(rules)
	d := &Domain{Name: "d", Rules: rules}
	sel := d.NewSelector([]string{"a", "b"}, [][]int{{0}, {1}})
	if sel.shapes[0].rules != nil {
		t.Fatalf("shape a has a table of %d: want none", len(sel.shapes[0].rules))
	}
	if sel.shapes[1].rules == nil {
		t.Fatal("shape b has no table")
	}
	for _, v := range []string{"p03z", "p16", "q"} {
		classes := []uint32{sel.Class(0, v), 0}
		for i := 0; i < 2; i++ {
			if _, _, known := sel.Select(0, classes); known {
				t.Fatalf("%q: Select knows it without a table", v)
			}
			got, found := sel.Learn(0, classes, []Entry{e("a", v)})
			want, wantFound := d.LookupIndex([]Entry{e("a", v)})
			if got != want || found != wantFound {
				t.Fatalf("%q: got %d %v, want %d %v", v, got, found, want, wantFound)
			}
		}
	}
}

// TestSelectorClasses checks the classes of a key tested for exact values and prefixes.
func TestSelectorClasses(t *testing.T) {
	d := &Domain{Name: "d", Rules: []*Rule{
		rule("pay", exact("path", "/pay")),
		rule("cat", wild("path", "/cat*")),
		rule("catalog", exact("tenant", "t"), wild("path", "/catalog/*")),
	}}
	sel := d.NewSelector([]string{"path", "tenant", "ip"}, [][]int{{0}, {1, 0}})
	// path: exact "/pay"; prefixes "/cat" and "/catalog/" in the order the tree holds them.
	if c := sel.keys[0]; c.n != 2<<2 || len(c.prefixes) != 2 {
		t.Fatalf("path: %d classes, prefixes %q: want 8 classes and two prefixes", c.n, c.prefixes)
	}
	if n := sel.keys[2].n; n != 1 {
		t.Errorf("ip: %d classes, want 1", n)
	}
	catalog := sel.Class(0, "/catalog/1")
	if catalog == sel.Class(0, "/cat") || catalog != sel.Class(0, "/catalog/2") {
		t.Errorf("classes of /catalog/1, /cat, /catalog/2: %d %d %d", catalog, sel.Class(0, "/cat"), sel.Class(0, "/catalog/2"))
	}
	if sel.Class(0, "/pay") == sel.Class(0, "/pa") || sel.Class(0, "/pa") != sel.Class(0, "") {
		t.Errorf("classes of /pay, /pa, \"\": %d %d %d", sel.Class(0, "/pay"), sel.Class(0, "/pa"), sel.Class(0, ""))
	}
}
