package simulate

import (
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/report"
)

// maxPoints bounds a time series; past it, buckets double in width.
const maxPoints = 240

// ruleStats accumulates one rule's results.
type ruleStats struct {
	out report.Rule
	// keys holds the rule's keys by store key. The replay looks a key up here only when its
	// slot (keySlot) does not hold it yet.
	keys map[string]*keyState
	// natDenials counts non-legit would-deny decisions per address or subnet value.
	natDenials map[string]int64
	series     [4][]int64 // requests, would deny, ideal deny, lease
}

const (
	serRequests = iota
	serWouldDeny
	serIdealDeny
	serLease
)

// keyState is one rate-limit key of a rule: its store key and what it saw. What every decision
// reads comes first, so that it shares the first cache lines.
type keyState struct {
	pruned   bool // dropped from ruleStats.keys; slots holding it look the key up again
	requests int64
	lastMs   int64
	denials  int64
	// The key resolved once in the engines: its lease on each gateway (zero until the gateway
	// first sees it; in inline for up to four gateways) and its ideal bucket.
	leases []engine.LeaseHandle
	ideal  engine.MemoryHandle
	inline [4]engine.LeaseHandle

	key string // the store key
	// display ("k=v, k=v") and addr, the address or subnet in the descriptor for the
	// shared-NAT check, are set on the key's first denial (Simulator.describe).
	display string
	addr    string
	legit   int64
}

// newKeyState returns the state of store key key, with room for the leases of n gateways.
func newKeyState(key string, n int) *keyState {
	ks := &keyState{key: key}
	if n <= len(ks.inline) {
		ks.leases = ks.inline[:n]
	} else {
		ks.leases = make([]engine.LeaseHandle, n)
	}
	return ks
}

func newRuleStats(domain string, r *policy.Rule) *ruleStats {
	return &ruleStats{
		out: report.Rule{Domain: domain, Rule: r.Name, Stage: string(r.Stage.Name), Pos: r.Pos.String(),
			Limit: limitString(r)},
		keys:       map[string]*keyState{},
		natDenials: map[string]int64{},
	}
}

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

// prune forgets keys idle since before cutoff that were never denied, so memory follows the
// live keys rather than every key ever seen.
func (s *ruleStats) prune(cutoff int64) {
	for key, ks := range s.keys {
		if ks.denials == 0 && ks.lastMs < cutoff {
			ks.pruned = true
			delete(s.keys, key)
		}
	}
}

// finish fills the report rule: top denied identities and the NAT collateral.
func (s *ruleStats) finish(topN, natUsers int, users func(string) (int, bool), startMs, bucketMs int64, buckets int) *report.Rule {
	for i := range s.series {
		if buckets > 0 {
			s.add(i, buckets-1, 0) // every series spans the whole replay
		}
	}
	var denied []*keyState
	for _, ks := range s.keys {
		if ks.denials > 0 {
			denied = append(denied, ks)
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
	for addr, n := range s.natDenials {
		if u, _ := users(addr); u >= natUsers {
			s.out.NATCollateral += n
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

// userSet counts distinct users behind an address, up to a cap. Most addresses only ever show
// one user, who is kept without a map. It is kept in natTracker.addrs by value, so that a
// lookup does not go on to another cache line. Users are kept as 64-bit hashes of their names
// (userHash): the tracker holds an entry for every address a log shows, and two users of one
// address colliding (about one chance in 10^15 for a hundred users) would only undercount it.
type userSet struct {
	first uint64              // the first user seen
	users map[uint64]struct{} // every user, once a second one is seen
	full  bool
}

// userHash identifies a user in a userSet.
func userHash(user string) uint64 { return xxhash.Sum64String(user) }

// natTracker records which users were seen behind each address and subnet.
type natTracker struct {
	cap   int
	addrs map[string]userSet
	user  []byte // scratch for a user's name (Simulator.countUser)
	// withUser counts the requests that carried a user; without any, the shared-NAT check
	// has nothing to count.
	withUser int64
}

// seeHash records user (a userHash) behind addr.
func (n *natTracker) seeHash(addr string, user uint64) {
	u, ok := n.addrs[addr]
	switch {
	case !ok:
		n.addrs[strings.Clone(addr)] = userSet{first: user, full: n.cap <= 1}
		return
	case u.full || user == u.first:
		return
	}
	if _, ok := u.users[user]; ok {
		return
	}
	changed := u.users == nil
	if changed {
		u.users = map[uint64]struct{}{u.first: {}}
	}
	u.users[user] = struct{}{}
	if len(u.users) >= n.cap {
		u.full, changed = true, true
	}
	if changed {
		// Assigning replaces the map's key with addr, which may view a buffer the caller
		// reuses: store a copy. This happens at most twice per address.
		n.addrs[strings.Clone(addr)] = u
	}
}

// empty returns a tracker like n with nothing seen.
func (n *natTracker) empty() natTracker {
	return natTracker{cap: n.cap, addrs: map[string]userSet{}}
}

// merge adds what o saw to n. The counts are then those of one tracker that saw everything
// both saw, in any order: a count is the number of distinct users seen, up to the cap.
func (n *natTracker) merge(o *natTracker) {
	n.withUser += o.withUser
	for addr, u := range o.addrs {
		if u.users == nil {
			n.seeHash(addr, u.first)
			continue
		}
		for user := range u.users {
			n.seeHash(addr, user)
		}
	}
}

// count is the number of distinct users seen behind addr, counted up to the tracker's cap, and
// whether it reached the cap (there may be more).
func (n *natTracker) count(addr string) (int, bool) {
	switch u, ok := n.addrs[addr]; {
	case !ok:
		return 0, false
	case u.users == nil:
		return 1, u.full
	default:
		return len(u.users), u.full
	}
}
