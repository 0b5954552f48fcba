package policy

// LimitPair is a limit of a rule's base version and the head version's limit it is compared
// with. Base is nil for a limit added, Head for one removed. Index is Head's index in the head
// rule's limits (Base's in the base rule's when removed).
type LimitPair struct {
	Base, Head *Limit
	Index      int
}

// PairLimits pairs two versions of a rule's limits for comparison, as rlctl diff and lint's
// governance read them: when each side has one limit, they are the pair; otherwise a head limit
// pairs with the first unpaired base limit of the same window and family (token bucket, or
// window), then of the same window, then the limits left pair in their order. The pairs come in head order, then the base limits left over (removed).
func PairLimits(base, head []Limit) []LimitPair {
	if len(base) == 1 && len(head) == 1 {
		return []LimitPair{{Base: &base[0], Head: &head[0]}}
	}
	used := make([]bool, len(base))
	pairs := make([]LimitPair, len(head))
	for i := range head {
		pairs[i] = LimitPair{Head: &head[i], Index: i}
	}
	// Of the same window, one of the same family first (a token bucket, or a window), as the
	// store keeps a limit's state: two limits of one window and two families swapped are the
	// same limits.
	for _, sameFamily := range []bool{true, false} {
		for i := range head {
			if pairs[i].Base != nil {
				continue
			}
			for j := range base {
				if !used[j] && base[j].WindowMs == head[i].WindowMs &&
					(!sameFamily || (base[j].Algorithm == TokenBucket) == (head[i].Algorithm == TokenBucket)) {
					pairs[i].Base, used[j] = &base[j], true
					break
				}
			}
		}
	}
	j := 0
	for i := range pairs {
		if pairs[i].Base != nil {
			continue
		}
		for j < len(base) && used[j] {
			j++
		}
		if j < len(base) {
			pairs[i].Base, used[j] = &base[j], true
		}
	}
	for j := range base {
		if !used[j] {
			pairs = append(pairs, LimitPair{Base: &base[j], Index: j})
		}
	}
	return pairs
}
