package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The values and prefixes of the random domains of TestSelectorMatchesLookup and
// TestSelectorConcurrent: some share prefixes, some are empty, "*" matches any value.
var (
	selectorKeys     = []string{"a", "b", "c", "ip"}
	selectorValues   = []string{"", "x", "xy", "xyz", "y", "yx", "/cat", "/catalog/1", "/catalog", "api_key:1", "api_key:", "z"}
	selectorPrefixes = []string{"", "x", "xy", "y", "/cat", "/catalog/", "api_key:"}
)

// randomSelectorDomain returns a random domain over selectorKeys, the shapes of its rules and a
// few shapes no rule has. Its rules match exact values, prefixes and any value, may shadow one
// another, and may be sub-sharded by "ip", which some rules also match on; with many, the
// domain has enough exact values of one key that a Selector finds them in a map.
func randomSelectorDomain(rng *rand.Rand, many bool) (*Domain, [][]int) {
	keys, values, prefixes := selectorKeys, selectorValues, selectorPrefixes
	var rules []*Rule
	for i, n := 0, 1+rng.IntN(12); i < n; i++ {
		var match []Match
		for level, depth := 0, 1+rng.IntN(3); level < depth; level++ {
			k := keys[rng.IntN(3)]
			if rng.IntN(10) == 0 {
				k = "ip"
			}
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
	if many {
		for i := 0; i <= maxExactCompared; i++ {
			rules = append(rules, rule(fmt.Sprintf("many%d", i), exact("a", fmt.Sprintf("v%d", i)), anyValue("b")))
		}
	}
	SortRules(rules)
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
		if r.Sharded() {
			shape = append(shape, index["ip"])
		}
		shapes = append(shapes, shape)
	}
	return &Domain{Name: "d", Rules: rules}, shapes
}

// checkSelector decides n random requests' descriptors of every shape with sel, learning what
// its tables do not know, and compares each answer with LookupIndex's. It returns how many
// answers came from the tables and how many were learnt.
func checkSelector(rng *rand.Rand, d *Domain, shapes [][]int, sel *Selector, n int, many bool) (known, learnt int, err error) {
	keys, values, prefixes := selectorKeys, selectorValues, selectorPrefixes
	classes := make([]uint32, len(keys))
	vals := make([]string, len(keys))
	for req := 0; req < n; req++ {
		for k := range keys {
			vals[k] = values[rng.IntN(len(values))]
			if rng.IntN(4) == 0 {
				vals[k] = prefixes[rng.IntN(len(prefixes))] + values[rng.IntN(len(values))]
			}
			if many && k == 0 && rng.IntN(2) == 0 {
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
				for _, r := range d.Rules {
					ms = append(ms, fmt.Sprintf("%s %v sub=%v", r.Name, r.Match, r.SubShards))
				}
				return known, learnt, fmt.Errorf("%v (known %v): got %d %v, want %d %v\nrules:\n%s",
					es, ok, rule, found, wantRule, wantFound, strings.Join(ms, "\n"))
			}
		}
	}
	return known, learnt, nil
}

// TestSelectorMatchesLookup checks a Selector against LookupIndex, its oracle, on random
// domains (randomSelectorDomain).
func TestSelectorMatchesLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var known, learnt int
	for round := 0; round < 300; round++ {
		many := round%10 == 0
		d, shapes := randomSelectorDomain(rng, many)
		k, l, err := checkSelector(rng, d, shapes, d.NewSelector(selectorKeys, shapes), 200, many)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		known, learnt = known+k, learnt+l
	}
	// Most answers must come from the tables, or this tested only LookupIndex.
	if known < 4*learnt {
		t.Errorf("%d answers from the tables, %d learnt: want most from the tables", known, learnt)
	}
}

// TestSelectorConcurrent checks that goroutines sharing a Selector, each learning into its
// tables, all get LookupIndex's answers (and, under -race, that they share it safely).
func TestSelectorConcurrent(t *testing.T) {
	for round := uint64(0); round < 20; round++ {
		d, shapes := randomSelectorDomain(rand.New(rand.NewPCG(round, 7)), round%2 == 0)
		sel := d.NewSelector(selectorKeys, shapes)
		errs := make(chan error, 4)
		for g := uint64(0); g < 4; g++ {
			go func() {
				_, _, err := checkSelector(rand.New(rand.NewPCG(round, g)), d, shapes, sel, 300, round%2 == 0)
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
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

// TestSelectorTablesBounded checks that a domain of many shapes gets tables only up to
// maxSelectorEntries entries in all, and that a shape past them is still looked up right.
func TestSelectorTablesBounded(t *testing.T) {
	// Shapes of two keys of 127 exact values each: a table of 128 × 128 entries a shape.
	var rules []*Rule
	var keys []string
	var shapes [][]int
	for i := range 2 * maxSelectorEntries / maxSelectorTable {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		keys = append(keys, a, b)
		shapes = append(shapes, []int{2 * i, 2*i + 1})
		for j := range 127 {
			v := fmt.Sprintf("v%d", j)
			rules = append(rules, rule(fmt.Sprintf("r%d_%d", i, j), exact(a, v), exact(b, v)))
		}
	}
	SortRules(rules)
	d := &Domain{Name: "d", Rules: rules}
	sel := d.NewSelector(keys, shapes)
	total, without := 0, -1
	for i := range sel.shapes {
		total += len(sel.shapes[i].rules)
		if sel.shapes[i].rules == nil && without < 0 {
			without = i
		}
	}
	if total > maxSelectorEntries || without < 0 {
		t.Fatalf("tables of %d entries in all, first shape without one %d: want at most %d, and some without", total, without, maxSelectorEntries)
	}
	classes := make([]uint32, len(keys))
	a, b := shapes[without][0], shapes[without][1]
	classes[a], classes[b] = sel.Class(a, "v7"), sel.Class(b, "v7")
	es := []Entry{e(keys[a], "v7"), e(keys[b], "v7")}
	got, found := sel.Learn(without, classes, es)
	if want, wantFound := d.LookupIndex(es); got != want || found != wantFound || !found {
		t.Fatalf("shape %d without a table: got %d %v, want %d %v", without, got, found, want, wantFound)
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
	// path: exact "/pay", and the wildcards' values as written, "/cat*" and "/catalog/*";
	// prefixes "/cat" and "/catalog/".
	if c := sel.keys[0]; c.n != 4<<2 || len(c.prefixes) != 2 {
		t.Fatalf("path: %d classes, prefixes %q: want 16 classes and two prefixes", c.n, c.prefixes)
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
