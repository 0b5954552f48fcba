package simulate

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
)

// Latency is a distribution of store reply latencies, in microseconds of virtual time: a fixed
// one (lo == hi) or uniform between lo and hi. The zero Latency is no latency, as "0" is. A
// Latency is configuration: each shard draws from a stream of its own (forShard), so one value
// serves any number of replays.
type Latency struct {
	lo, hi   int64 // µs
	seed     uint64
	rng      *rand.Rand // a shard's stream (forShard); nil in a Latency ParseLatency returns
	original string
}

// ParseLatency reads a --store-latency value: a duration ("1ms", "500us", "0") or
// "uniform:LO-HI" ("uniform:0.5ms-2ms"), in whole microseconds, which the virtual clock counts.
// seed seeds a uniform latency's draws: the figures of a replay with one depend on it.
func ParseLatency(s string, seed uint64) (Latency, error) {
	l := Latency{original: s, seed: seed}
	if s == "" || s == "0" {
		l.original = "0"
		return l, nil
	}
	if rest, ok := strings.CutPrefix(s, "uniform:"); ok {
		a, b, ok := strings.Cut(rest, "-")
		if !ok {
			return l, fmt.Errorf("--store-latency %q: want uniform:LO-HI, such as uniform:0.5ms-2ms", s)
		}
		lo, err := latencyMicros(s, "LO", a)
		if err != nil {
			return l, err
		}
		hi, err := latencyMicros(s, "HI", b)
		if err != nil {
			return l, err
		}
		if hi < lo {
			return l, fmt.Errorf("--store-latency %q: HI is below LO", s)
		}
		l.lo, l.hi = lo, hi
		return l, nil
	}
	d, err := latencyMicros(s, "", s)
	if err != nil {
		return l, err
	}
	l.lo, l.hi = d, d
	return l, nil
}

// latencyMicros reads part, the duration called name ("LO", "HI", or "" for the whole value) of
// --store-latency value s, in microseconds.
func latencyMicros(s, name, part string) (int64, error) {
	what := "a duration such as 1ms, or uniform:LO-HI"
	if name != "" {
		what = name + ": a duration such as 0.5ms"
	}
	d, err := time.ParseDuration(part)
	switch {
	case part == "" && name != "":
		// uniform:-1ms-2ms: a negative LO cannot be written, as '-' separates LO from HI.
		return 0, fmt.Errorf("--store-latency %q: %s is empty (LO and HI are 0 or more)", s, name)
	case err != nil:
		return 0, fmt.Errorf("--store-latency %q: want %s", s, what)
	case d < 0:
		return 0, fmt.Errorf("--store-latency %q: %s is below 0", s, strings.TrimSpace(name+" "+part))
	case d%time.Microsecond != 0:
		return 0, fmt.Errorf("--store-latency %q: %s is not a whole number of microseconds, which the virtual clock counts", s, strings.TrimSpace(name+" "+part))
	}
	return d.Microseconds(), nil
}

func (l *Latency) draw() int64 {
	if l.hi <= l.lo {
		return l.lo
	}
	return l.lo + l.rng.Int64N(l.hi-l.lo+1)
}

func (l Latency) String() string { return l.original }

// forShard returns l drawing from shard i's own stream of the seed: each shard draws its
// replies' latencies in its own order, whichever goroutine runs it (shard).
func (l Latency) forShard(i int) Latency {
	l.rng = rand.New(rand.NewPCG(l.seed, 0x5eed+uint64(i)))
	return l
}

// event is a store reply (or return) landing at a virtual instant.
type event struct {
	atUs int64
	seq  uint64
	fn   func(context.Context)
}

// eventQueue is a min-heap of events by time, then by sequence. It is typed rather than a
// container/heap: boxing each event into an interface cost two allocations per store call.
// (atUs, seq) is unique, so the order events land in does not depend on the heap's layout.
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].atUs != q[j].atUs {
		return q[i].atUs < q[j].atUs
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// pop removes and returns the earliest event; the queue must not be empty.
func (q *eventQueue) pop() event {
	h := *q
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{} // drop the reference to fn
	h = h[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, least) {
			least = l
		}
		if r < len(h) && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return e
}

// Assignment says which virtual gateway a record goes to.
type Assignment struct {
	// Kind is "round-robin", "hash" (a hash of Field picks the gateway) or "field" (Field names
	// the gateway; each distinct value is its own gateway).
	Kind  string
	Field string
}

// ParseAssignment reads a --assign value: round-robin, hash:FIELD or field:FIELD. FIELD is a
// well-known field or a request header, in any case (a record holds both in lower case).
func ParseAssignment(s string) (Assignment, error) {
	switch {
	case s == "" || s == "round-robin":
		return Assignment{Kind: "round-robin"}, nil
	case strings.HasPrefix(s, "hash:") && len(s) > 5:
		return Assignment{Kind: "hash", Field: strings.ToLower(s[5:])}, nil
	case strings.HasPrefix(s, "field:") && len(s) > 6:
		return Assignment{Kind: "field", Field: strings.ToLower(s[6:])}, nil
	}
	return Assignment{}, fmt.Errorf("--assign %q: want round-robin, hash:FIELD or field:FIELD", s)
}

func (a Assignment) String() string {
	if a.Kind == "round-robin" {
		return a.Kind
	}
	return a.Kind + ":" + a.Field
}

// gatewaySet names the virtual gateways (enforcers) and says which rules each enforces. A
// gateway's name is its instance ID, which places it in canaries. A set never changes once
// made: a field assignment that adds a gateway makes a new one (Simulator.addGateway), so the
// shards' workers read the set a chunk was sequenced with while the sequencer adds more.
type gatewaySet struct {
	names []string
	// enforced[r][g] says rule r rejects on gateway g given its stage (policy.Rule.Mode).
	enforced [][]bool
}

// with returns a set of gs's gateways and one more named name.
func (gs *gatewaySet) with(name string, rules []*ruleSim) *gatewaySet {
	n := &gatewaySet{names: append(gs.names[:len(gs.names):len(gs.names)], name), enforced: make([][]bool, len(rules))}
	for i, rs := range rules {
		var old []bool
		if i < len(gs.enforced) {
			old = gs.enforced[i]
		}
		n.enforced[i] = append(old[:len(old):len(old)], rs.rule.Mode(name) == policy.ModeEnforce)
	}
	return n
}

// MaxGateways bounds the virtual gateways, given (Config.Gateways) or named by a field
// assignment's values (the gateway "unnamed", of records without the field, is not counted).
// Each costs a lease manager per rule and a lease per key it sees; a replay whose field shows
// more distinct values than this (a request ID, say) fails.
const MaxGateways = 1024

// assigner picks gateways.
type assigner struct {
	a      Assignment
	n      int
	next   int
	byName map[string]int
	// missing counts records without the field of a hash or field assignment: the hash sends
	// them all to one gateway, and the field to the one named "unnamed".
	missing int64
	named   int // gateways a field assignment made for values of the field
}

// pick returns the gateway of rec, or -1 when a field assignment would need more than
// MaxGateways.
func (as *assigner) pick(s *Simulator, rec *accesslog.Record) int {
	switch as.a.Kind {
	case "hash":
		v := rec.Field(as.a.Field)
		if v == "" {
			as.missing++
		}
		h := fnv.New32a()
		h.Write([]byte(v))
		return int(h.Sum32() % uint32(as.n))
	case "field":
		name := rec.Field(as.a.Field)
		if name == "" {
			as.missing++
		}
		if i, ok := as.byName[name]; ok {
			return i
		}
		if name == "" {
			name = "unnamed"
		}
		if i, ok := as.byName[name]; ok {
			return i
		}
		if name != "unnamed" {
			if as.named == MaxGateways {
				return -1
			}
			as.named++
		}
		// The gateway keeps its name, which Run's records view in a buffer it reuses.
		name = strings.Clone(name)
		i := s.addGateway(name)
		as.byName[name] = i
		return i
	}
	i := as.next
	as.next++
	if as.next == as.n {
		as.next = 0
	}
	return i
}

func gatewayName(i int) string { return "gw-" + strconv.Itoa(i) }

// meteredStore wraps a shard's store for one rule: it counts store calls and records the
// largest lease granted per time bucket. An error it records for the shard names the rule
// (ruleSim.name): the engines are given no key to name (cellKey).
type meteredStore struct {
	sh    *shard
	inner engine.Store
	st    *ruleStats
	rule  string
}

// failed records err, when there is one, as the shard's store error, naming the rule.
func (m *meteredStore) failed(err error) {
	if err != nil {
		m.sh.storeFailed(fmt.Errorf("rule %s: %w", m.rule, err))
	}
}

func (m *meteredStore) Take(ctx context.Context, r engine.TakeRequest) (engine.Result, error) {
	res, err := m.inner.Take(ctx, r)
	m.failed(err)
	m.st.out.StoreCalls++
	if res.Granted > 0 {
		m.st.out.LeaseMax = max(m.st.out.LeaseMax, res.Granted)
		m.st.maxAt(serLease, m.sh.bucket(), res.Granted)
	}
	return res, err
}

func (m *meteredStore) Return(ctx context.Context, r engine.ReturnRequest) error {
	err := m.inner.Return(ctx, r)
	m.failed(err)
	return err
}
