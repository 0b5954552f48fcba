package schema

import (
	"slices"
	"strings"
)

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
