package policy

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Entry is one entry of a rate-limit descriptor, as Envoy sends it.
type Entry struct {
	Key   string
	Value string
}

// matcher holds a domain's descriptor tree. It is built on first use, so a Domain decoded from a
// snapshot needs no extra step; Compile builds it ahead of the request path.
type matcher struct {
	once sync.Once
	root *node
}

// node is one level of the descriptor tree. Children are tried in envoyproxy/ratelimit's order:
// an exact key and value, then wildcards in declared order, then key only.
type node struct {
	rule *Rule
	at   int // rule's index in the domain's Rules
	// exact holds the exact children by key, each key's by value: an entry of another key
	// hashes nothing, and one of a key here hashes only its value.
	exact     []exactChildren
	wildcards []wildcard
	// any holds the key-only children, a handful at most: a list a lookup reads through
	// costs less than a map's hash of the key.
	any []keyChild
}

type keyChild struct {
	key  string
	next *node
}

type exactChildren struct {
	key     string
	byValue map[string]*node
}

type wildcard struct {
	key, prefix string
	next        *node
	// first is the first rule through this wildcard, at level level of its match; Shadowed
	// names it.
	first *Rule
	level int
}

// Compile builds the descriptor tree that Lookup uses. Lookup calls it on first use; calling it
// when a domain is loaded keeps that work off the request path. It is safe for concurrent use.
func (d *Domain) Compile() {
	d.matcher.once.Do(func() {
		root := buildTree(d.Rules)
		keys := make(map[string]string, len(d.Sources))
		for _, s := range d.Sources {
			keys[s.Key] = s.Key
		}
		root.intern(keys)
		d.matcher.root = root
	})
}

// intern gives the keys of n's subtree the strings of keys where they are equal, the domain's
// sources' own: entries built from the sources (a replay's) then carry the very strings the tree
// compares them with, and a comparison ends at their pointers instead of reading their bytes.
func (n *node) intern(keys map[string]string) {
	for i := range n.exact {
		x := &n.exact[i]
		if k, ok := keys[x.key]; ok {
			x.key = k
		}
		for _, c := range x.byValue {
			c.intern(keys)
		}
	}
	for i := range n.wildcards {
		w := &n.wildcards[i]
		if k, ok := keys[w.key]; ok {
			w.key = k
		}
		w.next.intern(keys)
	}
	for i := range n.any {
		a := &n.any[i]
		if k, ok := keys[a.key]; ok {
			a.key = k
		}
		a.next.intern(keys)
	}
}

// Lookup returns the rule that the descriptor entries select, with envoyproxy/ratelimit's
// semantics for entries of the rules' keys (ERL compares key and value joined with '_', and so
// can also take a child of another key: erlconfig notes where it would). At each level it takes the child whose key and value equal the entry's, else the
// first wildcard child (declared value "prefix*") in declared order whose key is the entry's and
// whose prefix starts the entry's value, else the key-only child. It never backtracks: once a
// child is taken, a failure deeper down is a miss. The descriptor's depth must equal the rule's.
//
// One exception to the depth rule: a descriptor for a sub-sharded rule carries one extra
// trailing entry, whose key is the rule's SubShards.Attribute and whose value picks the shard.
// Lookup returns that rule for it (the loader rejects a deeper rule that would match the same
// entry), and only for it: without the entry the descriptor selects nothing.
//
// Lookup does not allocate. It is safe for concurrent use once Rules no longer change.
func (d *Domain) Lookup(entries []Entry) (*Rule, bool) {
	i, ok := d.LookupIndex(entries)
	if !ok {
		return nil, false
	}
	return d.Rules[i], true
}

// LookupIndex is Lookup, returning the selected rule's index in d.Rules: a caller that keeps
// state per rule indexes a slice with it rather than a map with the rule. d.Rules must not change
// once the tree is built.
func (d *Domain) LookupIndex(entries []Entry) (int, bool) {
	d.Compile()
	n := d.matcher.root
	for i := range entries {
		e := &entries[i] // not a copy: an Entry is two strings
		next := n.child(e)
		if next == nil {
			if r := n.rule; r != nil && r.Sharded() && i == len(entries)-1 && e.Key == r.SubShards.Attribute {
				return n.at, true
			}
			return 0, false
		}
		n = next
	}
	if n.rule == nil || len(entries) == 0 || n.rule.Sharded() {
		return 0, false
	}
	return n.at, true
}

// Sharded reports whether r's keys are split into sub-shards (a count of 2 or more), so that its
// descriptors carry a sub-shard entry. Such a rule's descriptor without that entry selects
// nothing: Envoy's rendered actions always send the entry, and a shorter descriptor of the same
// entries comes from another rule's shape (the enforcer would otherwise count the request twice,
// once on shard 0).
func (r *Rule) Sharded() bool { return r.SubShards != nil && r.SubShards.Count > 1 }

// DescriptorKeys are the keys of the descriptor that selects r, in order: its match keys, then
// the sub-shard attribute of a sharded rule. Envoy's actions, simulate's matcher and the
// enforcer see the same.
func (r *Rule) DescriptorKeys() []string {
	keys := make([]string, 0, len(r.Match)+1)
	for _, m := range r.Match {
		keys = append(keys, m.Key)
	}
	if r.Sharded() {
		keys = append(keys, r.SubShards.Attribute)
	}
	return keys
}

// child is the node entry e leads to from n, as envoyproxy/ratelimit finds it: first a child
// whose value e's value is, a wildcard's included, written with its '*' (that service looks
// KEY_VALUE up in one map of every value as written, before it tries any wildcard); then the
// first wildcard whose prefix starts e's value; then the key-only child.
func (n *node) child(e *Entry) *node {
	for i := range n.exact {
		if x := &n.exact[i]; x.key == e.Key {
			if c := x.byValue[e.Value]; c != nil {
				return c
			}
			break
		}
	}
	if strings.HasSuffix(e.Value, "*") {
		for i := range n.wildcards {
			if w := &n.wildcards[i]; w.key == e.Key && len(w.prefix)+1 == len(e.Value) && strings.HasPrefix(e.Value, w.prefix) {
				return w.next
			}
		}
	}
	for i := range n.wildcards {
		w := &n.wildcards[i]
		if w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
			return w.next
		}
	}
	return n.keyOnly(e.Key)
}

// keyOnly returns n's key-only child for key, or nil.
func (n *node) keyOnly(key string) *node {
	for i := range n.any {
		if a := &n.any[i]; a.key == key {
			return a.next
		}
	}
	return nil
}

// buildTree inserts rules in order; a later rule with the same match as an earlier one is
// ignored (Validate reports it).
func buildTree(rules []*Rule) *node {
	root := &node{}
	for i, r := range rules {
		n := root
		for level := range r.Match {
			n = n.childFor(r, level)
		}
		if n.rule == nil {
			n.rule, n.at = r, i
		}
	}
	return root
}

// A Shadow is a rule that Lookup never selects: at level Level (0-based) of its match, a wildcard
// of the same key that Lookup tries first takes every entry its match entry would take. By is the
// first rule through that wildcard, whose match entry at Level is the wildcard.
type Shadow struct {
	Rule  *Rule
	Level int
	By    *Rule
}

// Shadowed returns the rules of d that Lookup never selects, in the order of d.Rules. Lookup
// tries wildcards in declared order and never backtracks, so a wildcard is shadowed by an earlier
// wildcard of the same key at the same level whose prefix starts its own, and a key-only match by
// a wildcard of the same key that matches every value ("*"). An exact match is never shadowed: a
// wildcard takes single values from it, never all of them. A rule with the same match as an
// earlier one is Validate's duplicate-match, not a shadow.
func (d *Domain) Shadowed() []Shadow {
	root := &node{}
	var out []Shadow
	for _, r := range d.Rules {
		n := root
		for level, m := range r.Match {
			if w := n.shadowing(m); w != nil {
				out = append(out, Shadow{Rule: r, Level: level, By: w.first})
				break
			}
			n = n.childFor(r, level)
		}
	}
	return out
}

// shadowing returns the wildcard child of n that Lookup takes instead of m for every entry m
// matches, or nil. For a wildcard only wildcards declared before it count; for a key-only match
// every wildcard counts, since Lookup tries them all first.
func (n *node) shadowing(m Match) *wildcard {
	if m.Kind == MatchExact {
		return nil
	}
	p := strings.TrimSuffix(m.Value, "*")
	for i := range n.wildcards {
		w := &n.wildcards[i]
		switch {
		case w.key != m.Key:
		case m.Kind != MatchWildcard && w.prefix == "":
			return w
		case m.Kind == MatchWildcard && w.prefix == p:
			return nil // m's own child: the wildcards after it come after m too
		case m.Kind == MatchWildcard && strings.HasPrefix(p, w.prefix):
			return w
		}
	}
	return nil
}

// childFor returns the child for r's match entry at level, adding it if it is new.
func (n *node) childFor(r *Rule, level int) *node {
	m := r.Match[level]
	switch m.Kind {
	case MatchExact:
		i := slices.IndexFunc(n.exact, func(x exactChildren) bool { return x.key == m.Key })
		if i < 0 {
			i = len(n.exact)
			n.exact = append(n.exact, exactChildren{key: m.Key, byValue: map[string]*node{}})
		}
		if c := n.exact[i].byValue[m.Value]; c != nil {
			return c
		}
		c := &node{}
		n.exact[i].byValue[m.Value] = c
		return c
	case MatchWildcard:
		prefix := strings.TrimSuffix(m.Value, "*")
		for _, w := range n.wildcards {
			if w.key == m.Key && w.prefix == prefix {
				return w.next
			}
		}
		c := &node{}
		n.wildcards = append(n.wildcards, wildcard{key: m.Key, prefix: prefix, next: c, first: r, level: level})
		return c
	default:
		if c := n.keyOnly(m.Key); c != nil {
			return c
		}
		c := &node{}
		n.any = append(n.any, keyChild{key: m.Key, next: c})
		return c
	}
}

// SortRules puts rules in precedence order, the order in which Lookup tries them: level by
// level, exact matches before wildcards before key-only matches, and otherwise in the given
// (declared) order. A rule comes before the rules nested below it.
func SortRules(rules []*Rule) {
	rank := func(k MatchKind) int {
		switch k {
		case MatchExact:
			return 0
		case MatchWildcard:
			return 1
		}
		return 2
	}
	// Siblings of the same kind keep the declared order of the first rule through them, so
	// rules nested below one parent stay together. group[r][d] is the declared index of the
	// first rule that shares r's match down to depth d; computed once, so sorting stays
	// O(n log n) in the number of rules.
	group := make(map[*Rule][]int, len(rules))
	first := make(map[string]int)
	for i, r := range rules {
		g := make([]int, len(r.Match))
		var prefix []byte
		for d, m := range r.Match {
			prefix = appendMatchKey(prefix, m)
			k := string(prefix)
			if _, ok := first[k]; !ok {
				first[k] = i
			}
			g[d] = first[k]
		}
		group[r] = g
	}
	sort.SliceStable(rules, func(i, j int) bool {
		a, b := rules[i], rules[j]
		for k := 0; k < len(a.Match) && k < len(b.Match); k++ {
			if sameMatch(a.Match[k:k+1], b.Match[k:k+1]) {
				continue
			}
			if ra, rb := rank(a.Match[k].Kind), rank(b.Match[k].Kind); ra != rb {
				return ra < rb
			}
			return group[a][k] < group[b][k]
		}
		return len(a.Match) < len(b.Match)
	})
}

func sameMatch(a, b []Match) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Value != b[i].Value || a[i].Kind != b[i].Kind {
			return false
		}
	}
	return true
}

// MatchKey encodes a match path as a string that is equal for two paths exactly when they match
// the same descriptors. Every entry is self-delimiting, so MatchKey(a) starts with MatchKey(b)
// exactly when b is a prefix of the path a. It is the one encoding of a match path: duplicate
// detection, precedence grouping and lint all use it.
func MatchKey(ms []Match) string {
	var b []byte
	for _, m := range ms {
		b = appendMatchKey(b, m)
	}
	return string(b)
}

func appendMatchKey(b []byte, m Match) []byte {
	v := m.Value
	if m.Kind == MatchAny {
		v = ""
	}
	b = strconv.AppendQuote(b, m.Key)
	b = append(b, '=')
	b = strconv.AppendQuote(b, v)
	b = append(b, '/')
	b = append(b, m.Kind...)
	return append(b, ';')
}

// Competing reports the entry at which matches a and b compete by declared order: the first
// where they differ, if both are wildcards of one key whose prefixes overlap ("/v1/*" and
// "/v1/orders*"). Lookup gives the values both match to the rule declared first, and never
// backtracks, so the order of two such rules decides which limit those values get.
func Competing(a, b []Match) (int, bool) {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if x.Key == y.Key && x.Value == y.Value && x.Kind == y.Kind {
			continue
		}
		if x.Key != y.Key || x.Kind != MatchWildcard || y.Kind != MatchWildcard {
			return 0, false
		}
		px, py := strings.TrimSuffix(x.Value, "*"), strings.TrimSuffix(y.Value, "*")
		return i, strings.HasPrefix(px, py) || strings.HasPrefix(py, px)
	}
	return 0, false
}
