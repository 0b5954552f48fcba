package policy

import (
	"fmt"
	"sort"
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
	rule      *Rule
	exact     map[Entry]*node
	wildcards []wildcard
	any       map[string]*node
}

type wildcard struct {
	key, prefix string
	next        *node
}

// Compile builds the descriptor tree that Lookup uses. Lookup calls it on first use; calling it
// when a domain is loaded keeps that work off the request path. It is safe for concurrent use.
func (d *Domain) Compile() {
	d.matcher.once.Do(func() { d.matcher.root = buildTree(d.Rules) })
}

// Lookup returns the rule that the descriptor entries select, with envoyproxy/ratelimit's
// semantics. At each level it takes the child whose key and value equal the entry's, else the
// first wildcard child (declared value "prefix*") in declared order whose key is the entry's and
// whose prefix starts the entry's value, else the key-only child. It never backtracks: once a
// child is taken, a failure deeper down is a miss. The descriptor's depth must equal the rule's.
//
// One exception to the depth rule: a descriptor for a sub-sharded rule carries one extra
// trailing entry, whose key is the rule's SubShards.Attribute and whose value picks the shard.
// Lookup returns that rule for it (the loader rejects a deeper rule that would match the same
// entry).
//
// Lookup does not allocate. It is safe for concurrent use once Rules no longer change.
func (d *Domain) Lookup(entries []Entry) (*Rule, bool) {
	d.Compile()
	n := d.matcher.root
	for i, e := range entries {
		next := n.child(e)
		if next == nil {
			if r := n.rule; r != nil && r.SubShards != nil && i == len(entries)-1 && e.Key == r.SubShards.Attribute {
				return r, true
			}
			return nil, false
		}
		n = next
	}
	if n.rule == nil || len(entries) == 0 {
		return nil, false
	}
	return n.rule, true
}

func (n *node) child(e Entry) *node {
	if c := n.exact[e]; c != nil {
		return c
	}
	for i := range n.wildcards {
		w := &n.wildcards[i]
		if w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
			return w.next
		}
	}
	return n.any[e.Key]
}

// buildTree inserts rules in order; a later rule with the same match as an earlier one is
// ignored (the loader reports it).
func buildTree(rules []*Rule) *node {
	root := &node{}
	for _, r := range rules {
		n := root
		for _, m := range r.Match {
			n = n.childFor(m)
		}
		if n.rule == nil {
			n.rule = r
		}
	}
	return root
}

// childFor returns the child for m, adding it if it is new.
func (n *node) childFor(m Match) *node {
	switch m.Kind {
	case MatchExact:
		e := Entry{m.Key, m.Value}
		if c := n.exact[e]; c != nil {
			return c
		}
		if n.exact == nil {
			n.exact = map[Entry]*node{}
		}
		c := &node{}
		n.exact[e] = c
		return c
	case MatchWildcard:
		prefix := strings.TrimSuffix(m.Value, "*")
		for _, w := range n.wildcards {
			if w.key == m.Key && w.prefix == prefix {
				return w.next
			}
		}
		c := &node{}
		n.wildcards = append(n.wildcards, wildcard{m.Key, prefix, c})
		return c
	default:
		if c := n.any[m.Key]; c != nil {
			return c
		}
		if n.any == nil {
			n.any = map[string]*node{}
		}
		c := &node{}
		n.any[m.Key] = c
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
		var prefix strings.Builder
		for d, m := range r.Match {
			fmt.Fprintf(&prefix, "%q=%q/%s;", m.Key, m.Value, m.Kind)
			k := prefix.String()
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
