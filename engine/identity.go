package engine

import "strconv"

// A key's hash holds the state of each of its limits under the limit's identity, not its
// place in the rule's list of limits: its family (a token bucket, or a window, whose
// count a sliding and a fixed window both read), its length (the window, or the bucket's
// refill period) and, for a list with several limits of the same family and length, its
// rank among them by requests and capacity. So a reload that adds a limit before the
// others, removes one, or reorders them leaves every other limit's count where it was.
// Stored by place, a limit read the state of whichever limit had held its place: adding a
// per-minute limit before an hourly one gave every key a new hour's allowance (2,469
// admitted of 1,000 in one hour), and removing a per-minute limit from before an hourly
// one read the hour's count as the minute's.
//
// A limit whose identity has no state (its window changed, or it is new) adopts the state
// of a limit the list no longer has, of its family: the longest-windowed such limits
// first, each taking the longest-windowed such state, which then moves under its own
// identity. A window of another length is decided against as it stands while it lasts
// (slot). An instance of a fleet still on the old limits adopts it back in turn, so both
// count in the one state until the fleet has reloaded. A limit whose family changed
// (a token bucket becoming a window) starts afresh. The states no limit takes stay, and
// keep the key's TTL from shrinking (others).
//
// Hashes stored before identities (tok0, win1, ...) are read and written by place by the
// scripts alone (common.lua), for an hour after this version first meets them, so that an
// instance of that version, during an upgrade, counts in the same fields; then they move to
// identities.

// MaxLimits is the most limits a key may have, and MaxAlike the most of one family and
// length among them.
const (
	MaxLimits = 512
	MaxAlike  = 16
)

// limitID is the identity of limit l, of rank dup among the alike limits of its list (idAt): the length in ms, shifted, then a bit for a window and
// dup in the low 4 bits (MaxAlike). Lengths stay below 2^53 (the exact range), so it fits
// in 58 bits, and a slot's tag holds it with 6 more.
func limitID(l Limit, dup int) int64 {
	var fam int64 = 1 << 4
	if l.Algorithm == TokenBucket {
		fam = 0
	}
	return l.Window<<5 | fam | int64(dup)
}

// idAt is the identity of xs[i], limit i of the list xs (limitID): its dup is how many alike
// limits of the list (sameKind) rank before it by requests, then capacity, then place, so
// that adding, removing or reordering alike limits leaves the others' identities. An exact
// does not keep it: 64 bytes, it fills one cache line.
func idAt(xs []exact, i int) int64 {
	dup := 0
	x := &xs[i]
	for j := range xs {
		o := &xs[j]
		if j != i && sameKind(o.Limit, x.Limit) &&
			(o.Requests < x.Requests || o.Requests == x.Requests && (o.capacity < x.capacity || o.capacity == x.capacity && j < i)) {
			dup++
		}
	}
	return limitID(x.Limit, dup)
}

// sameKind reports whether a and b are stored alike: the same family and length.
func sameKind(a, b Limit) bool {
	return a.Window == b.Window && (a.Algorithm == TokenBucket) == (b.Algorithm == TokenBucket)
}

func idWindow(id int64) int64 { return id >> 5 }
func idBucket(id int64) bool  { return id&(1<<4) == 0 }
func idDup(id int64) int64    { return id & (1<<4 - 1) }
func idBefore(a, b int64) bool {
	return idWindow(a) > idWindow(b) || idWindow(a) == idWindow(b) && idDup(a) < idDup(b)
}

// idSuffix is how a field's name ends for identity id, after a ':': "b" for a token
// bucket or "w" for a window, its length in ms, and "#" and dup when dup is above 0
// ("w3600000", "b60000#1"). common.lua's limits builds the same.
func idSuffix(id int64) string {
	b := make([]byte, 0, 24)
	if idBucket(id) {
		b = append(b, 'b')
	} else {
		b = append(b, 'w')
	}
	b = strconv.AppendInt(b, idWindow(id), 10)
	if d := idDup(id); d > 0 {
		b = append(b, '#')
		b = strconv.AppendInt(b, d, 10)
	}
	return string(b)
}

// align returns the slots of a key's state in the order of its limits xs: slot i is the
// state stored under limit i's identity, or else the state it adopts, or else fresh state
// of its identity; the states no limit took follow. common.lua's load pairs states and
// limits the same way.
func align(xs []exact, old []slot) []slot {
	out := make([]slot, len(xs), len(xs)+len(old))
	used := make([]bool, len(old))
	paired := make([]bool, len(xs))
	for i := range xs {
		for j := range old {
			if !used[j] && old[j].has() != 0 && old[j].id() == idAt(xs, i) {
				out[i], used[j], paired[i] = old[j], true, true
				break
			}
		}
	}
	// Adoption: the limits left, longest window first (then in their order), each take
	// the unused state of their family of the longest window (then the lowest dup).
	for {
		i := -1
		for k := range xs {
			if !paired[k] && (i < 0 || xs[k].Window > xs[i].Window) {
				i = k
			}
		}
		if i < 0 {
			break
		}
		paired[i] = true
		best := -1
		for j := range old {
			if !used[j] && old[j].has() != 0 && idBucket(old[j].id()) == (xs[i].Algorithm == TokenBucket) && (best < 0 || idBefore(old[j].id(), old[best].id())) {
				best = j
			}
		}
		if best < 0 {
			out[i] = freshSlot(idAt(xs, i))
			continue
		}
		// Adopted, the state moves under limit i's identity: left under the name of a limit
		// the list no longer has, it would go to that limit if it came back.
		out[i], used[best] = old[best], true
		out[i].tag = out[i].tag&63 | uint64(idAt(xs, i))<<6
	}
	for j := range old {
		if !used[j] && old[j].has() != 0 {
			out = append(out, old[j])
		}
	}
	return out
}
