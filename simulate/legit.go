package simulate

import "strings"

// legitSet holds the descriptor values of legitimate callers (--legit and the rules' own lists).
// A would-deny decision (at any stage, shadow included) whose request's values hold one counts
// as a legit denial. The shard workers ask for every one, so the common answer, no, is made
// cheap: most values are ruled out by
// their length, and a few legit values are compared one by one rather than hashed for the map.
// Add the values, then seal the set before asking.
type legitSet struct {
	m map[string]bool
	// lens has bit n set when a legit value is n bytes long (n < 256).
	lens [4]uint64
	// few lists the values when there are at most maxLegitFew of them, nil otherwise.
	few []string
}

// maxLegitFew is the most legit values that legitSet compares one by one. Policies mark a few
// callers legitimate, and comparing a value of a legit value's length with them costs less than
// hashing it: on the benchmark log the map's hash had about 1 % of a replay's CPU samples
// (perf), the comparisons none that show.
const maxLegitFew = 8

// addEntry adds an entry of --legit or of a rule's legit list, which both read the same way:
// a descriptor value, or KEY=VALUE as reports show an identity, with KEY a descriptor key of the
// policies (one of keys). Such an entry adds VALUE and, since a value may hold '=', the entry as
// written; an entry whose KEY is no descriptor key is a value as written.
func (l *legitSet) addEntry(e string, keys map[string]bool) {
	l.add(e)
	if k, v, ok := strings.Cut(e, "="); ok && keys[k] {
		l.add(v)
	}
}

func (l *legitSet) add(v string) {
	if l.m == nil {
		l.m = map[string]bool{}
	}
	l.m[v] = true
}

// seal works out the lengths and the list of few values, once every value is added.
func (l *legitSet) seal() {
	l.few = nil
	for v := range l.m {
		if n := len(v); n < len(l.lens)*64 {
			l.lens[n/64] |= 1 << (n % 64)
		}
		if len(l.m) <= maxLegitFew {
			l.few = append(l.few, v)
		}
	}
}

// anyOf reports whether any of a request's descriptor values (those whose ok is set) is
// legitimate.
func (l *legitSet) anyOf(values []string, oks []bool) bool {
	if len(l.m) == 0 {
		return false
	}
	for i, v := range values {
		if oks[i] && l.mayHave(len(v)) && l.has(v) {
			return true
		}
	}
	return false
}

// mayHave reports whether a legit value may be n bytes long.
func (l *legitSet) mayHave(n int) bool {
	return n >= len(l.lens)*64 || l.lens[n/64]&(1<<(n%64)) != 0
}

func (l *legitSet) has(v string) bool {
	if l.few == nil {
		return l.m[v]
	}
	for _, f := range l.few {
		if f == v {
			return true
		}
	}
	return false
}
