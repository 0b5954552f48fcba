package simulate

import (
	"sort"
	"strings"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/report"
)

// maxPoints bounds a time series; past it, buckets double in width.
const maxPoints = 240

// ruleStats accumulates one rule's results.
type ruleStats struct {
	out report.Rule
	// keys holds the rule's keys by a hash of the store key (prepared on the reading goroutine,
	// so the replay does not hash long keys), chained through keyState.next when hashes collide.
	keys map[uint64]*keyState
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

// keyState is one rate-limit key of a rule: its store key and what it saw.
type keyState struct {
	key  string    // the store key
	next *keyState // another key with the same hash (ruleStats.keys)
	// display ("k=v, k=v") and addr, the address or subnet in the descriptor for the
	// shared-NAT check, are set on the key's first denial (Simulator.describe).
	display  string
	addr     string
	requests int64
	denials  int64
	legit    int64
	lastMs   int64
	// The key resolved once in the engines: its lease on each gateway (zero until the gateway
	// first sees it) and its ideal bucket.
	leases []engine.LeaseHandle
	ideal  engine.MemoryHandle
}

func newRuleStats(domain string, r *policy.Rule) *ruleStats {
	return &ruleStats{
		out: report.Rule{Domain: domain, Rule: r.Name, Stage: string(r.Stage.Name), Pos: r.Pos.String(),
			Limit: limitString(r)},
		keys:       map[uint64]*keyState{},
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

// lookup returns the key with store key key and its hash, or nil.
func (s *ruleStats) lookup(hash uint64, key []byte) *keyState {
	ks := s.keys[hash]
	for ks != nil && ks.key != string(key) {
		ks = ks.next
	}
	return ks
}

// insert adds a key that lookup does not find.
func (s *ruleStats) insert(hash uint64, ks *keyState) {
	ks.next, s.keys[hash] = s.keys[hash], ks
}

// prune forgets keys idle since before cutoff that were never denied, so memory follows the
// live keys rather than every key ever seen.
func (s *ruleStats) prune(cutoff int64) {
	for h, first := range s.keys {
		var kept *keyState
		for ks := first; ks != nil; {
			next := ks.next
			if ks.denials > 0 || ks.lastMs >= cutoff {
				ks.next, kept = kept, ks
			}
			ks = next
		}
		if kept == nil {
			delete(s.keys, h)
		} else {
			s.keys[h] = kept
		}
	}
}

// finish fills the report rule: top denied identities and the NAT collateral.
func (s *ruleStats) finish(topN, natUsers int, users func(string) int, startMs, bucketMs int64, buckets int) *report.Rule {
	for i := range s.series {
		if buckets > 0 {
			s.add(i, buckets-1, 0) // every series spans the whole replay
		}
	}
	var denied []*keyState
	for _, first := range s.keys {
		for ks := first; ks != nil; ks = ks.next {
			if ks.denials > 0 {
				denied = append(denied, ks)
			}
		}
	}
	sort.Slice(denied, func(i, j int) bool {
		if denied[i].denials != denied[j].denials {
			return denied[i].denials > denied[j].denials
		}
		return denied[i].display < denied[j].display
	})
	for _, ks := range denied[:min(topN, len(denied))] {
		id := report.Identity{Value: ks.display, Denials: ks.denials, Requests: ks.requests, Legit: ks.legit > 0}
		if ks.addr != "" {
			id.Users = users(ks.addr)
		}
		s.out.TopDenied = append(s.out.TopDenied, id)
	}
	for addr, n := range s.natDenials {
		if users(addr) >= natUsers {
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

// userSet counts distinct users behind an address, up to a cap.
type userSet struct {
	users map[string]struct{}
	full  bool
}

// natTracker records which users were seen behind each address and subnet.
type natTracker struct {
	cap   int
	addrs map[string]*userSet
}

func (n *natTracker) see(addr, user string) {
	u := n.addrs[addr]
	if u == nil {
		u = &userSet{users: map[string]struct{}{}}
		n.addrs[strings.Clone(addr)] = u
	}
	if u.full {
		return
	}
	if _, ok := u.users[user]; !ok {
		u.users[strings.Clone(user)] = struct{}{}
		if len(u.users) >= n.cap {
			u.full = true
		}
	}
}

// count is the number of distinct users seen behind addr, capped at the threshold.
func (n *natTracker) count(addr string) int {
	if u := n.addrs[addr]; u != nil {
		return len(u.users)
	}
	return 0
}
