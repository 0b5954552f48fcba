package simulate

import (
	"hash/maphash"
	"sort"

	"github.com/cespare/xxhash/v2"
	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/simulate/report"
)

// maxPoints bounds a time series; past it, buckets double in width.
const maxPoints = 240

// ruleStats accumulates one rule's results within one shard (shard); Simulator.Finish adds
// the shards' together.
type ruleStats struct {
	out    report.Rule // the counts, StoreCalls and LeaseMax
	series [4][]int64  // requests, would deny, ideal deny, lease
}

const (
	serRequests = iota
	serWouldDeny
	serIdealDeny
	serLease
)

// keyState is one rate-limit key of a rule: what it saw, and its state in the engines. It is
// one allocation: what finding the key reads comes first, then what every decision reads, so
// that a decision touches a few adjacent cache lines of one object rather than an object per
// engine. Its 376 bytes take the 384-byte size class, whose objects start on a cache line.
type keyState struct {
	id uint64 // the store key's ID (storeKeyHashes)

	requests int64
	lastMs   int64
	// The key's state in the engines, held here rather than by them (they keep no index of
	// their keys): its lease on each gateway (zero until the gateway first sees it; in leases
	// for the first four gateways, the default count, and in more for the others), its bucket
	// in the ideal engine, and its bucket in the virtual fleet's store, which every gateway's
	// lease of the key reaches. The engines are given its rule's limits, and no key (cellKey).
	leases [4]engine.LeaseRef
	ideal  engine.MemoryCell
	store  engine.MemoryCell
	more   *[]engine.LeaseRef

	rule int // its rule's index in Simulator.rules
	// What reports say of a denied key, set on its first denial (shard.describe): most keys
	// are never denied, and their state is smaller without it (see denied).
	*keyDenials
}

// denied reports whether the key has been denied: its denials are counted in keyDenials.
func (ks *keyState) denied() bool { return ks.keyDenials != nil }

// lease returns the key's lease on gateway g.
func (ks *keyState) lease(g int) *engine.LeaseRef {
	if g < len(ks.leases) {
		return &ks.leases[g]
	}
	if ks.more == nil {
		ks.more = new([]engine.LeaseRef)
	}
	i := g - len(ks.leases)
	if grow := i + 1 - len(*ks.more); grow > 0 { // a gateway added since (Assignment "field")
		*ks.more = append(*ks.more, make([]engine.LeaseRef, grow)...)
	}
	return &(*ks.more)[i]
}

// gateways is the number of gateways the key has room for a lease on.
func (ks *keyState) gateways() int {
	if ks.more == nil {
		return len(ks.leases)
	}
	return len(ks.leases) + len(*ks.more)
}

// keyDenials is what reports say of a denied key.
type keyDenials struct {
	denials int64
	// key is the store key, which orders denied keys of as many denials (shard.prune). It is
	// built for denied keys only: no engine needs it (cellKey).
	key string
	// display ("k=v, k=v") and addr, the address or subnet in the descriptor for the
	// shared-NAT check.
	display string
	addr    string
	legit   int64 // denials of requests marked legitimate
}

// newKeyState returns the state of a new key of rule (by index), with room for the leases of n
// gateways: a key state the table pruned (free), cleared, or a new one.
func (t *keyTable) newKeyState(rule, n int) *keyState {
	t.created++
	var ks *keyState
	if last := len(t.free) - 1; last >= 0 {
		ks, t.free[last], t.free = t.free[last], nil, t.free[:last]
		*ks = keyState{}
	} else {
		ks = new(keyState)
	}
	ks.rule = rule
	if n > len(ks.leases) {
		ks.lease(n - 1) // makes room for them all
	}
	return ks
}

// keyTable holds a shard's keys by the hash of their store key (storeKeyHashes), which prepare
// computes on the parsing goroutines, so that the replay never hashes a long key. It is an open-addressing
// table of (hash, key state) pairs, probed linearly from the hash's low bits: a lookup reads
// one slot's cache line, where a Go map reads its group's control word and then the slot.
// Keys whose hashes are equal sit in slots one after another, and are told apart by a second,
// independent hash of the key (its ID): the two hashes of two keys are equal about once in
// 2^128 tries, and comparing them spares the replay a read of the key's bytes, which sit in
// memory of their own.
type keyTable struct {
	// slots are a power of two, at most three quarters used (add), so that a probe soon
	// meets an empty slot, one without a key state, which ends it.
	slots []keySlot
	n     int // the keys held
	// denied counts the keys with denials (they are in the report). Pruning keeps them up to
	// the shard's deniedLimit; past it, the idle ones with the fewest denials go (shard.prune).
	denied int
	// free holds pruned key states for new keys to reuse: a new key then costs no
	// allocation of fresh memory, which is most of a short-lived key's cost. It keeps no
	// more than the keys made since the prune before (created), what the next minute is
	// likely to need. Only keys never denied go there: a record not yet merged may still
	// read a denied key's state (Simulator.tally), never another's.
	free    []*keyState
	created int
}

type keySlot struct {
	h  uint64
	ks *keyState
}

// minSlots is the size of an empty open-addressing table: a keyTable or a natTracker.
const minSlots = 64

// crowded reports whether an open-addressing table of size slots would be more than three
// quarters full with n entries, and must grow before it takes them: a probe then soon meets an
// empty slot.
func crowded(n, size int) bool { return 4*n > 3*size }

func newKeyTable() keyTable { return keyTable{slots: make([]keySlot, minSlots)} }

// get returns the state of the key with hash h and ID id (storeKeyHashes), or nil.
func (t *keyTable) get(h, id uint64) *keyState {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.ks == nil {
			return nil
		}
		if s.h == h && s.ks.id == id {
			return s.ks
		}
	}
}

// add adds ks, whose key hashes to h and is not in the table.
func (t *keyTable) add(h uint64, ks *keyState) {
	if crowded(t.n+1, len(t.slots)) {
		t.resize(2 * len(t.slots))
	}
	t.put(h, ks)
	t.n++
}

// put places ks in the first empty slot from h's.
func (t *keyTable) put(h uint64, ks *keyState) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].ks != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = keySlot{h, ks}
}

// resize moves the keys into a table of n slots.
func (t *keyTable) resize(n int) {
	old := t.slots
	t.slots = make([]keySlot, n)
	for _, s := range old {
		if s.ks != nil {
			t.put(s.h, s.ks)
		}
	}
}

// each calls fn with every key state in the table, in no particular order.
func (t *keyTable) each(fn func(*keyState)) {
	for _, s := range t.slots {
		if s.ks != nil {
			fn(s.ks)
		}
	}
}

// prune forgets the keys that drop says to, so that memory follows the live keys rather than
// every key ever seen. The keys left move into a new table once a quarter of the old one or
// less is used, a smaller one; otherwise they are placed again within the table.
func (t *keyTable) prune(drop func(*keyState) bool) {
	keep := min(t.created, maxFree)
	t.created = 0
	empty := -1 // a slot empty before the drops: no key's probe runs through it (rehash)
	n := t.n
	for i, s := range t.slots {
		if s.ks == nil {
			empty = i
			continue
		}
		if !drop(s.ks) {
			continue
		}
		switch {
		case s.ks.denied():
			t.denied--
		case len(t.free) < keep:
			t.free = append(t.free, s.ks)
		}
		t.slots[i].ks = nil // a hole, which rehash or resize closes
		n--
	}
	if n == t.n {
		return
	}
	size := len(t.slots)
	for size > minSlots && 4*n <= size {
		size /= 2
	}
	t.n = n
	if size == len(t.slots) {
		t.rehash(empty)
		return
	}
	t.resize(size)
}

// rehash places the keys again within the table once prune has emptied the slots of the keys
// it dropped, where a probe would otherwise stop short of a key beyond them. It allocates
// nothing: a new table each prune was about 10 MB a million-line replay, memory first touched.
// empty is a slot that was empty before the drops, so that no key's probe runs through it: the
// keys after it are taken in probe order, and each one's probe from its home then passes only
// slots placed again already.
func (t *keyTable) rehash(empty int) {
	mask := len(t.slots) - 1
	for k := 1; k < len(t.slots); k++ {
		i := (empty + k) & mask
		if s := t.slots[i]; s.ks != nil {
			t.slots[i] = keySlot{}
			t.put(s.h, s.ks)
		}
	}
}

// maxFree bounds a key table's free list: 65,536 key states over all shards, 24 MiB (384 B
// each, their size class).
const maxFree = 1 << 16 / shardCount

// keyHash is a hash of bytes that is the same from process to process (the JWT cache's).
func keyHash(key []byte) uint64 { return xxhash.Sum64(key) }

// keyIDSeed seeds keyID and the second hash of a store key (storeKeyHashes). It differs from
// process to process, which changes nothing: those hashes only ever tell things apart, and
// order nothing.
var keyIDSeed = maphash.MakeSeed()

// keyID is a second, independent hash of bytes, for the JWT cache.
func keyID(key []byte) uint64 { return maphash.Bytes(keyIDSeed, key) }

func (s *ruleStats) add(series, bucket int, n int64) {
	for len(s.series[series]) <= bucket {
		s.series[series] = append(s.series[series], 0)
	}
	s.series[series][bucket] += n
}

func (s *ruleStats) maxAt(series, bucket int, n int64) {
	s.add(series, bucket, 0)
	s.series[series][bucket] = max(s.series[series][bucket], n)
}

// halve merges pairs of buckets.
func (s *ruleStats) halve() {
	for i := range s.series {
		old := s.series[i]
		merged := make([]int64, (len(old)+1)/2)
		for j, v := range old {
			if i == serLease {
				merged[j/2] = max(merged[j/2], v)
			} else {
				merged[j/2] += v
			}
		}
		s.series[i] = merged
	}
}

// merge adds o, of another shard with the same bucket width, to s.
func (s *ruleStats) merge(o *ruleStats) {
	a, b := &s.out, &o.out
	a.Requests += b.Requests
	a.WouldDeny += b.WouldDeny
	a.Denied += b.Denied
	a.IdealDeny += b.IdealDeny
	a.OverAdmission += b.OverAdmission
	a.UnderAdmission += b.UnderAdmission
	a.LegitDenials += b.LegitDenials
	a.StoreCalls += b.StoreCalls
	a.LeaseMax = max(a.LeaseMax, b.LeaseMax)
	a.StrandedEnd += b.StrandedEnd
	for i := range s.series {
		for j, v := range o.series[i] {
			if i == serLease {
				s.maxAt(i, j, v)
			} else {
				s.add(i, j, v)
			}
		}
	}
}

// finish fills the report rule from the shards' stats added into s and the rule's denied
// keys, which it sorts in place: the top topN denied identities and the NAT collateral.
// users says how many users were seen behind an address or subnet (and whether that count hit
// its cap); a denial there is collateral when they are natUsers or more. The series start at
// startMs, in buckets of bucketMs, and all span buckets buckets.
func (s *ruleStats) finish(denied []*keyState, topN, natUsers int, users func(string) (int, bool), startMs, bucketMs int64, buckets int) *report.Rule {
	for i := range s.series {
		if buckets > 0 {
			s.add(i, buckets-1, 0) // every series spans the whole replay
		}
	}
	sort.Slice(denied, func(i, j int) bool {
		if denied[i].denials != denied[j].denials {
			return denied[i].denials > denied[j].denials
		}
		return denied[i].display < denied[j].display
	})
	for _, ks := range denied[:max(0, min(topN, len(denied)))] {
		id := report.Identity{Value: ks.display, Denials: ks.denials, Requests: ks.requests, Legit: ks.legit > 0, LegitDenials: ks.legit}
		if ks.addr != "" {
			id.Users, id.UsersCapped = users(ks.addr)
		}
		s.out.TopDenied = append(s.out.TopDenied, id)
	}
	// Non-legit denials of a key with an address or subnet are collateral when enough users
	// were seen behind it.
	for _, ks := range denied {
		if ks.addr == "" {
			continue
		}
		if u, _ := users(ks.addr); u >= natUsers {
			s.out.NATCollateral += ks.denials - ks.legit
		}
	}
	s.out.FalsePositives = s.out.LegitDenials + s.out.NATCollateral
	s.out.Series = report.Series{StartMs: startMs, BucketMs: bucketMs,
		Requests: nonNil(s.series[serRequests]), WouldDeny: nonNil(s.series[serWouldDeny]),
		IdealDeny: nonNil(s.series[serIdealDeny]), Lease: nonNil(s.series[serLease])}
	return &s.out
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

// natTracker records which users were seen behind each address and subnet of one shard, up to
// cap users each. Users are kept as 64-bit hashes of their names (userHash), and addresses by
// theirs (addrHash): the tracker holds an entry for every address a log shows, and two users of
// one address colliding (about one chance in 10^15 for a hundred users), or two of a million
// addresses (one in 10^7), would only miscount them.
//
// Like keyTable it is an open-addressing table, probed linearly from the address hash's low
// bits and at most three quarters full; it only grows, up to limit addresses. Most addresses
// only ever show one user, so a slot holds the address and its first user, 16 bytes: the
// tables of a million-line replay take about 8 MB instead of 16 (it was no faster for it). The
// users of an address that has shown a second one are in more until they reach the cap; the
// address is then full, its slot says so, and its users are let go.
type natTracker struct {
	cap   int // users counted per address
	limit int // addresses tracked; users behind further ones are not counted
	slots []natSlot
	n     int // addresses tracked
	more  map[uint64]map[uint64]struct{}
	// untracked counts the sightings of a user behind an address that was not tracked
	// because limit addresses were.
	untracked int64
}

// natSlot is an address's slot: its addrHash, 0 for an empty slot (addrHash is never 0), and
// the first user seen behind it, 0 once the address is full (userHash is never 0 either).
type natSlot struct {
	addr  uint64
	first uint64
}

// userHash identifies a user in a natTracker: never 0, which marks a full address (the hash 0
// counts as 1).
func userHash(user string) uint64 { return max(xxhash.Sum64String(user), 1) }

// addrHash identifies an address or subnet in a natTracker: never 0, which marks an empty slot
// (the hash 0 counts as 1).
func addrHash(addr string) uint64 { return max(xxhash.Sum64String(addr), 1) }

func newNATTracker(cap, limit int) natTracker {
	return natTracker{cap: cap, limit: limit, slots: make([]natSlot, minSlots)}
}

// slot returns the slot of the address whose addrHash is addr, or the empty slot where it
// would go.
func (n *natTracker) slot(addr uint64) *natSlot {
	mask := uint64(len(n.slots) - 1)
	for i := addr & mask; ; i = (i + 1) & mask {
		if s := &n.slots[i]; s.addr == 0 || s.addr == addr {
			return s
		}
	}
}

// seeHash records user (a userHash) behind the address whose addrHash is addr.
func (n *natTracker) seeHash(addr, user uint64) {
	s := n.slot(addr)
	if s.addr == 0 {
		if n.n >= n.limit {
			n.untracked++
			return
		}
		if crowded(n.n+1, len(n.slots)) {
			n.grow()
			s = n.slot(addr)
		}
		*s = natSlot{addr: addr, first: user}
		n.n++
		return
	}
	if user == s.first || s.first == 0 || n.cap <= 1 {
		return
	}
	users := n.more[addr]
	if users == nil {
		if n.more == nil {
			n.more = map[uint64]map[uint64]struct{}{}
		}
		users = map[uint64]struct{}{s.first: {}}
		n.more[addr] = users
	}
	users[user] = struct{}{}
	if len(users) >= n.cap {
		s.first = 0 // full
		delete(n.more, addr)
	}
}

// grow moves the addresses into a table twice the size.
func (n *natTracker) grow() {
	old := n.slots
	n.slots = make([]natSlot, 2*len(old))
	for _, s := range old {
		if s.addr != 0 {
			*n.slot(s.addr) = s
		}
	}
}

// count is the number of distinct users seen behind the address whose addrHash is addr,
// counted up to the tracker's cap, and whether it reached the cap (there may be more).
func (n *natTracker) count(addr uint64) (int, bool) {
	switch s := n.slot(addr); {
	case s.addr == 0:
		return 0, false
	case s.first == 0:
		return n.cap, true
	}
	if users := n.more[addr]; users != nil {
		return len(users), false
	}
	return 1, n.cap <= 1
}
