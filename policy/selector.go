package policy

import (
	"maps"
	"slices"
	"strings"
	"sync/atomic"
)

// A Selector is LookupIndex for descriptors of a few fixed shapes (lists of keys), decided by
// what the descriptor tree can tell of their values instead of by walking it: a caller that
// looks up several shapes of every request, as a replay does, sorts each value into its class
// once (Class) and then finds each shape's rule in a small table (Select).
//
// The tree tests a value of key k in two ways only, wherever an entry of key k meets a node:
// whether it equals the value of one of the node's exact children of key k, or of a wildcard
// child written with its '*', and whether it starts with the prefix of one of its wildcard
// children of key k. A value's class says which
// of all the values that exact children of key k hold it equals, if any, and which of all the
// prefixes that wildcard children of key k test start it. Values of one class take the same
// child at every node, so descriptors of one shape whose values have the same classes select
// the same rule: a shape's table remembers, for each tuple of classes, what LookupIndex said of
// the first descriptor it met with them (Learn). What else LookupIndex looks at, the key-only
// children, the depth, and the sub-shard entry of a sub-sharded rule, depends on the entries'
// keys and places only, which the shape fixes.
//
// A Selector is safe for concurrent use: its tables are filled in atomically, and two callers
// that learn the same entry at once write the same answer.
type Selector struct {
	d      *Domain
	keys   []valueClasses // by the caller's key index
	shapes []shapeRules
}

// valueClasses sorts the values of one descriptor key into the classes the tree tells apart.
// A class is the value's index in exact plus one (0: none of them), shifted left by the number
// of prefixes, with bit i set when prefixes[i] starts the value.
type valueClasses struct {
	exact    []string
	index    map[string]uint32 // exact's indexes plus one, when there are too many to compare
	prefixes []string
	shift    uint   // len(prefixes), for a shift the compiler need not check
	n        uint64 // the number of classes; 0 for a key of too many prefixes
	inTable  bool   // some shape's table is placed by the key's classes
}

// shapeRules is one shape's table.
type shapeRules struct {
	// terms are the shape's classed keys, each with its stride in rules: a key of one class
	// adds nothing to a place in the table.
	terms []classTerm
	// rules holds, by the classes of a descriptor's values (the sum of each class times its
	// stride), 0 before a descriptor with those classes was learnt, 1 when it selects no rule,
	// else the rule's index plus 2. It is nil for a shape of too many tuples of classes:
	// Select then knows nothing and every descriptor is learnt by LookupIndex.
	rules []atomic.Int32
}

type classTerm struct {
	key    int
	stride uint32
}

// Bounds on the tables: a shape whose tuples of classes number more than maxSelectorTable
// (each an int32) is looked up by walking the tree, and so is a key tested by more than
// maxSelectorPrefixes prefixes, and every shape past the first maxSelectorEntries entries of
// the tables, so that a domain of many shapes does not make megabytes of tables when it loads.
// A key's exact values are compared one by one up to maxExactCompared of them, and found in a
// map beyond.
const (
	maxSelectorTable    = 1 << 14
	maxSelectorEntries  = 1 << 18
	maxSelectorPrefixes = 16
	maxExactCompared    = 8
)

// NewSelector returns a Selector of d for the descriptors of shapes, each a list of indexes into
// keys. d's rules must not change afterwards (as for LookupIndex).
func (d *Domain) NewSelector(keys []string, shapes [][]int) *Selector {
	d.Compile()
	exact, prefixes := map[string]map[string]bool{}, map[string]map[string]bool{}
	d.matcher.root.tests(exact, prefixes)
	s := &Selector{d: d, keys: make([]valueClasses, len(keys))}
	for i, k := range keys {
		// Sorted, so that the classes' numbers do not depend on the order of the tree's maps.
		c := valueClasses{exact: slices.Sorted(maps.Keys(exact[k])), prefixes: slices.Sorted(maps.Keys(prefixes[k]))}
		if len(c.exact) > maxExactCompared {
			c.index = make(map[string]uint32, len(c.exact))
			for j, v := range c.exact {
				c.index[v] = uint32(j) + 1
			}
		}
		if len(c.prefixes) <= maxSelectorPrefixes {
			c.shift = uint(len(c.prefixes))
			c.n = uint64(len(c.exact)+1) << c.shift
		}
		s.keys[i] = c
	}
	s.shapes = make([]shapeRules, len(shapes))
	budget := uint64(maxSelectorEntries)
	for i, shape := range shapes {
		var sh shapeRules
		size := uint64(1)
		for _, k := range shape {
			n := s.keys[k].n
			if n == 0 || size*n > maxSelectorTable {
				size = 0
				break
			}
			if n > 1 {
				sh.terms = append(sh.terms, classTerm{key: k, stride: uint32(size)})
				size *= n
			}
		}
		if size > 0 && size <= budget {
			budget -= size
			sh.rules = make([]atomic.Int32, size)
			for _, t := range sh.terms {
				s.keys[t.key].inTable = true
			}
		} else {
			sh.terms = nil
		}
		s.shapes[i] = sh
	}
	return s
}

// tests adds to exact and prefixes, by key, the values the exact children and the prefixes the
// wildcard children of n's subtree test.
func (n *node) tests(exact, prefixes map[string]map[string]bool) {
	add := func(m map[string]map[string]bool, k, v string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
	}
	for _, x := range n.exact {
		for v, c := range x.byValue {
			add(exact, x.key, v)
			c.tests(exact, prefixes)
		}
	}
	for _, w := range n.wildcards {
		add(prefixes, w.key, w.prefix)
		add(exact, w.key, w.prefix+"*") // child finds a wildcard by its value as written first
		w.next.tests(exact, prefixes)
	}
	for _, a := range n.any {
		a.next.tests(exact, prefixes)
	}
}

// Classed reports whether a table is placed by the classes of key k's values: Class of
// another key is not needed, and is 0.
func (s *Selector) Classed(k int) bool { return s.keys[k].inTable }

// Class returns the class of v as a value of key k (an index into NewSelector's keys).
func (s *Selector) Class(k int, v string) uint32 {
	c := &s.keys[k]
	if !c.inTable {
		return 0
	}
	var x uint32
	if c.index != nil {
		x = c.index[v]
	} else {
		for i, e := range c.exact {
			if e == v {
				x = uint32(i) + 1
				break
			}
		}
	}
	x <<= c.shift & 31
	for i, p := range c.prefixes {
		if strings.HasPrefix(v, p) {
			x |= 1 << i
		}
	}
	return x
}

// Select returns what LookupIndex returns for a descriptor of shape (an index into NewSelector's
// shapes) whose values have classes (by key index, as Class returned them), when the shape's
// table knows it: known is false until a descriptor with these classes was learnt, and always
// for a shape without a table.
func (s *Selector) Select(shape int, classes []uint32) (rule int, found, known bool) {
	r := s.shapes[shape].lookup(classes)
	return int(r) - 2, r > 1, r > 0
}

// lookup returns the entry of the shape's table for classes, 0 when it has none.
func (sh *shapeRules) lookup(classes []uint32) int32 {
	if sh.rules == nil {
		return 0
	}
	return sh.rules[sh.at(classes)].Load()
}

// Learn returns LookupIndex(entries), entries being a descriptor of shape whose values have
// classes, and remembers it in the shape's table.
func (s *Selector) Learn(shape int, classes []uint32, entries []Entry) (int, bool) {
	rule, found := s.d.LookupIndex(entries)
	if sh := &s.shapes[shape]; sh.rules != nil {
		r := int32(1)
		if found {
			r = int32(rule) + 2
		}
		sh.rules[sh.at(classes)].Store(r)
	}
	return rule, found
}

// at is the place of classes in the shape's table.
func (sh *shapeRules) at(classes []uint32) uint32 {
	var i uint32
	for _, t := range sh.terms {
		i += classes[t.key] * t.stride
	}
	return i
}
