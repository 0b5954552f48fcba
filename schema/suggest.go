package schema

import (
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
)

// Nearest is nearest, for other packages' messages: the likely misspellings of s among
// candidates (a rule name in a test's expectation, say).
func Nearest(s string, candidates []string) []string { return nearest(s, candidates) }

// nearest returns the candidates closest to s by edit distance (insertions, deletions,
// substitutions and swaps of neighbours, ignoring case), when they are close enough to be a
// likely misspelling: at most one edit for a name of up to four letters, and one more for each
// further four. It returns nothing when no candidate is that close, and several only on a tie,
// in the candidates' order.
func nearest(s string, candidates []string) []string {
	limit := 1 + (len(s)-1)/4
	best := limit + 1
	var out []string
	for _, c := range candidates {
		if c == s {
			continue
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		switch {
		case d > limit:
		case d < best:
			best, out = d, []string{c}
		case d == best && !slices.Contains(out, c):
			out = append(out, c)
		}
	}
	return out
}

// editDistance is the optimal string alignment distance between a and b, by byte: policy field
// names are ASCII.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// notAllowed is CUE's message for a field that a closed struct of the schema does not declare.
const notAllowed = "field not allowed"

// suggestFields adds to each problem that says a field is not allowed the schema's nearest field
// of the same struct (see nearest), read from unified, the user's value unified with #Policy:
// "field not allowed: did you mean "limits"?".
func suggestFields(probs Problems, unified cue.Value) {
	// The fields not allowed, by parent path: none of them is one the parent allows.
	refused := map[string]bool{}
	for _, p := range probs {
		if p.Message == notAllowed {
			refused[p.Path] = true
		}
	}
	for i, p := range probs {
		if p.Message != notAllowed {
			continue
		}
		labels := splitPath(p.Path)
		if len(labels) == 0 {
			continue
		}
		parent := unified // a field at the top level
		if len(labels) > 1 {
			parent = unified.LookupPath(selectorPath(labels[:len(labels)-1]))
		}
		it, err := parent.Fields(cue.Optional(true))
		if err != nil {
			continue
		}
		name := labels[len(labels)-1]
		var names []string // the fields the schema allows here: the unified value's, but the bad one
		prefix := strings.TrimSuffix(p.Path, name)
		for it.Next() {
			if n := it.Selector().Unquoted(); n != name && !refused[prefix+n] && !refused[prefix+strconv.Quote(n)] {
				names = append(names, n)
			}
		}
		near := nearest(name, names)
		if len(near) == 0 && len(name) >= 3 {
			// An abbreviation: val for value, algo for algorithm.
			for _, n := range names {
				if strings.HasPrefix(n, name) {
					near = append(near, n)
				}
			}
		}
		switch {
		case erlHints[name] != "":
			probs[i].Message += ": " + erlHints[name]
		case len(near) > 0:
			q := make([]string, len(near))
			for j, n := range near {
				q[j] = strconv.Quote(n)
			}
			probs[i].Message += ": did you mean " + strings.Join(q, " or ") + "?"
		case len(names) > 0 && len(names) <= 12:
			probs[i].Message += " (allowed here: " + strings.Join(names, ", ") + ")"
		}
	}
}

// erlHints answer the fields of envoyproxy/ratelimit's configuration that its users write in a
// policy by habit.
var erlHints = map[string]string{
	"requests_per_unit": `a limit is {requests: N, window: "1m"} here (rlctl import ratelimit converts a whole configuration)`,
	"unit":              `a limit is {requests: N, window: "1m"} here: window takes any duration, such as "1s", "1m", "1h" or "1d"`,
	"shadow_mode":       `a rule's stage says it: stage: "shadow" (or {name: "shadow", since: "YYYY-MM-DD"})`,
	"descriptors":       `rules are named fields of the domain's rules, each with a match list: rules: NAME: {match: [{key: "k", value: "v"}], limits: [...]}`,
	"rate_limit":        `a rule's limits are a list: limits: [{requests: N, window: "1m"}]`,
}

// splitPath splits a problem's path (policy.Path's form) into labels, unquoting quoted ones.
func splitPath(path string) []string {
	var labels []string
	for path != "" {
		if path[0] == '"' {
			if q, err := strconv.QuotedPrefix(path); err == nil {
				u, _ := strconv.Unquote(q)
				labels = append(labels, u)
				path = strings.TrimPrefix(path[len(q):], ".")
				continue
			}
		}
		label, rest, _ := strings.Cut(path, ".")
		labels, path = append(labels, label), rest
	}
	return labels
}
