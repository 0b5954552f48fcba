package erlconfig

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// ERL counts a descriptor's requests in the Redis key prefix + domain + "_", then key + "_" +
// value + "_" for each entry, then the window's start (src/limiter/cache_key.go,
// GenerateCacheKey): values are not escaped, so two descriptors whose joined texts coincide
// share one counter. Under rules [user] and [user, path], user="a_path_b" is counted with user="a",
// path="b"; under one rule [user, path], user="a_path_b", path="c" with user="a",
// path="b_path_c". A client that chooses such a value spends another's counter. rlctl's keys
// escape each part (engine.AppendKey), so its counters never meet. counterClashes finds the
// rules whose descriptors can meet in ERL, so that render and import can say so.

// globToken is one byte of a counter text's pattern, or a free span (any bytes) where a value
// is the client's: a key-only match's value, the rest of a wildcard's. entry is the match
// entry a value byte or free span belongs to, -1 for the keys and separators.
type globToken struct {
	c     byte
	free  bool
	entry int
}

// counterGlob is the pattern of the counter texts of the descriptors ms matches, after the
// common domain prefix and before the window's start.
func counterGlob(ms []policy.Match) []globToken {
	var g []globToken
	lit := func(s string, entry int) {
		for i := 0; i < len(s); i++ {
			g = append(g, globToken{c: s[i], entry: entry})
		}
	}
	for i, m := range ms {
		lit(m.Key+"_", -1)
		switch {
		case m.Value == "":
			g = append(g, globToken{free: true, entry: i})
		case m.Kind == policy.MatchWildcard && strings.HasSuffix(m.Value, "*"):
			lit(strings.TrimSuffix(m.Value, "*"), i)
			g = append(g, globToken{free: true, entry: i})
		default:
			lit(m.Value, i)
		}
		lit("_", -1)
	}
	return g
}

// meet returns values of p's entries and of q's whose counter texts are the same, or false
// when no values make them so. It is the intersection of two patterns whose only operator is a
// free span, worked out by dynamic programming over their positions, then walked back for an
// example.
func meet(p, q []globToken, np, nq int) (pv, qv []string, ok bool) {
	memo := make([]int8, (len(p)+1)*(len(q)+1)) // 0 unknown, 1 yes, 2 no
	var f func(i, j int) bool
	f = func(i, j int) bool {
		k := i*(len(q)+1) + j
		if memo[k] != 0 {
			return memo[k] == 1
		}
		r := false
		switch {
		case i == len(p) && j == len(q):
			r = true
		case i < len(p) && j < len(q) && !p[i].free && !q[j].free:
			r = p[i].c == q[j].c && f(i+1, j+1)
		default:
			r = (i < len(p) && p[i].free && (f(i+1, j) || (j < len(q) && !q[j].free && f(i, j+1)))) ||
				(j < len(q) && q[j].free && (f(i, j+1) || (i < len(p) && !p[i].free && f(i+1, j))))
		}
		memo[k] = 2
		if r {
			memo[k] = 1
		}
		return r
	}
	if !f(0, 0) {
		return nil, nil, false
	}
	pb, qb := make([]strings.Builder, np), make([]strings.Builder, nq)
	put := func(bs []strings.Builder, t globToken, c byte) {
		if t.entry >= 0 {
			bs[t.entry].WriteByte(c)
		}
	}
	shared := -1 // i*(len(q)+1)+j where both spans took a byte: a value seldom empty
	for i, j := 0, 0; i < len(p) || j < len(q); {
		switch {
		case i < len(p) && j < len(q) && p[i].free && q[j].free && shared != i*(len(q)+1)+j:
			put(pb, p[i], 'a')
			put(qb, q[j], 'a')
			shared = i*(len(q)+1) + j
		case i < len(p) && j < len(q) && !p[i].free && !q[j].free:
			put(pb, p[i], p[i].c)
			put(qb, q[j], q[j].c)
			i, j = i+1, j+1
		case i < len(p) && p[i].free && j < len(q) && !q[j].free && f(i, j+1):
			put(pb, p[i], q[j].c)
			put(qb, q[j], q[j].c)
			j++
		case j < len(q) && q[j].free && i < len(p) && !p[i].free && f(i+1, j):
			put(pb, p[i], p[i].c)
			put(qb, q[j], p[i].c)
			i++
		case i < len(p) && p[i].free && f(i+1, j):
			i++
		default:
			j++
		}
	}
	for i := range pb {
		pv = append(pv, pb[i].String())
	}
	for i := range qb {
		qv = append(qv, qb[i].String())
	}
	return pv, qv, true
}

// entriesText writes a descriptor of ms with values vs: key="value", comma-separated.
func entriesText(ms []policy.Match, vs []string) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s=%q", m.Key, vs[i])
	}
	return strings.Join(parts, ", ")
}

// sameRuleClash returns two descriptors of ms whose counter texts are the same, when ms has two
// values that are the client's: the first free span takes the text up to the second's, or the
// second takes it. It reports false for fewer than two.
func sameRuleClash(ms []policy.Match) (a, b []string, ok bool) {
	g := counterGlob(ms)
	first, second := -1, -1
	for i, t := range g {
		if t.free {
			if first < 0 {
				first = i
			} else {
				second = i
				break
			}
		}
	}
	if second < 0 {
		return nil, nil, false
	}
	var between strings.Builder
	for _, t := range g[first+1 : second] {
		between.WriteByte(t.c)
	}
	bt := between.String()
	fixed := func(t globToken) string { // a value's bytes before its free span
		return strings.TrimSuffix(ms[t.entry].Value, "*")
	}
	a, b = make([]string, len(ms)), make([]string, len(ms))
	for i, m := range ms {
		a[i], b[i] = m.Value, m.Value
	}
	e1, e2 := g[first].entry, g[second].entry
	a[e1], a[e2] = fixed(g[first])+"a"+bt+"b", fixed(g[second])+"c"
	b[e1], b[e2] = fixed(g[first])+"a", fixed(g[second])+"b"+bt+"c"
	return a, b, true
}

// clash is two descriptors, of match lists i and j of a domain (i may be j), that ERL counts
// in one Redis key: values a of list i's entries and b of list j's. counterClashes finds those
// of one list (two values that are the client's) and those of lists of other keys; it does not
// look for those of two lists of the same keys (rules [a="x", b] and [a, b="y"] can meet, through
// a="x_b_q", b="y" and a="x", b="q_b_y").
type clash struct {
	i, j int
	a, b []string
}

// counterClashes returns the clashes among the descriptors of the match lists of one domain.
func counterClashes(lists [][]policy.Match) []clash {
	var out []clash
	globs := make([][]globToken, len(lists))
	for i, ms := range lists {
		globs[i] = counterGlob(ms)
	}
	for i, ms := range lists {
		if a, b, ok := sameRuleClash(ms); ok {
			out = append(out, clash{i: i, j: i, a: a, b: b})
		}
		for j := i + 1; j < len(lists); j++ {
			if slices.EqualFunc(ms, lists[j], sameKey) {
				// The same keys: a text both make may be one descriptor, which ERL gives one
				// rule (user="vip" is the exact rule's, not the key-only one's). Two that
				// differ meet only through values that hold the keys' separators, which this
				// does not look for.
				continue
			}
			if a, b, ok := meet(globs[i], globs[j], len(ms), len(lists[j])); ok {
				out = append(out, clash{i: i, j: j, a: a, b: b})
			}
		}
	}
	return out
}

// counterWhy is why a clash matters, for the notes of render and import.
const counterWhy = "ERL joins a descriptor's keys and values with '_' into its Redis key and does not escape values, so a client that chooses such a value spends the other's counter"

// counterClashes notes each rule of rules, of domain d, whose descriptors ERL can count in
// another descriptor's Redis key: another rule's, or another of its own. An entry whose source
// gives one value (generic_key, path_match) is that value, not one the client chooses.
func (n *notes) counterClashes(d *policy.Domain, rules []*policy.Rule) {
	lists := make([][]policy.Match, len(rules))
	for i, r := range rules {
		ms := r.Match
		for j, m := range r.Match {
			src := d.Source(m.Key)
			if m.Kind != policy.MatchAny || src == nil || (src.Kind != policy.SourceGenericKey && src.Kind != policy.SourcePathMatch) {
				continue
			}
			if &ms[0] == &r.Match[0] {
				ms = slices.Clone(r.Match) // the rule's own stays as it is
			}
			ms[j].Value, ms[j].Kind = src.Value, policy.MatchExact
		}
		lists[i] = ms
	}
	for _, c := range counterClashes(lists) {
		ri, rj := rules[c.i], rules[c.j]
		if c.i == c.j {
			n.add(Approximation, ri.Name, ri.Pos, "ERL counts descriptors %s and %s in one Redis key: %s; rlctl's keys do not meet",
				entriesText(ri.Match, c.a), entriesText(ri.Match, c.b), counterWhy)
			continue
		}
		n.add(Approximation, rj.Name, rj.Pos, "ERL counts rule %s's descriptor %s and rule %s's %s in one Redis key: %s; rlctl's keys do not meet",
			ri.Name, entriesText(ri.Match, c.a), rj.Name, entriesText(rj.Match, c.b), counterWhy)
	}
}

// sameKey reports whether a and b match entries of one key.
func sameKey(a, b policy.Match) bool { return a.Key == b.Key }
