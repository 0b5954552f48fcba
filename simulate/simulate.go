// Package simulate replays access logs through the rate-limit engine before a policy ships: each
// record becomes descriptors through the compiled model's sources (one definition, shared with
// render and the enforcer), N virtual gateways each run the engine's lease manager against one
// in-memory store on a virtual clock, store replies land after a modelled latency, and a second,
// ideal engine (one global bucket, no leasing) runs beside them. The report counts, per rule,
// what would have been denied, how leasing drifted from the ideal, stranded tokens, and false
// positives: denials of identities marked legitimate and of addresses shared by many users.
//
// JWT claims are decoded from the logged Authorization header without verifying signatures.
//
// Rule limits, store keys, lease settings (engine.PlanRule, engine.AppendRuleKey) and stages
// (policy.Rule.Mode, with each virtual gateway's name as its instance ID) are the enforcer's own.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
)

// Config configures a Simulator.
type Config struct {
	Model *policy.Model
	// Domain limits the replay to one domain; empty means all.
	Domain   string
	Gateways int // at least 1
	Assign   Assignment
	Latency  Latency
	// NATUsers is K: a denial on an address or subnet key behind which at least K distinct
	// users (JWT subjects or TLS fingerprints) were seen is shared-NAT collateral.
	NATUsers int
	// Legit are descriptor values of legitimate callers, in addition to the rules' own lists.
	// A value may also be written KEY=VALUE with KEY a descriptor key, as reports show
	// identities; it then stands for VALUE.
	Legit []string
	// TopN is how many denied identities to report per rule: 0 means 10, and a negative
	// number none.
	TopN int
	// Observer, when not nil, is told of every would-deny decision and of the users behind
	// addresses (Observer).
	Observer Observer
}

// Simulator replays records. It is not safe for concurrent use: feed it from one goroutine.
type Simulator struct {
	cfg      Config
	domains  []*domainSim
	rules    []*ruleSim
	gateways []gateway
	assign   *assigner
	store    *engine.Memory // the virtual fleet's shared store
	ideal    *engine.Memory // the ideal single-bucket engine
	events   eventQueue
	seq      uint64
	nowUs    int64
	started  bool
	startMs  int64
	bucketMs int64
	nextTick int64 // ms of the next housekeeping tick
	ticks    int64
	// lastBucket is the bucket of the last record once Finish has begun, -1 before: the store
	// replies Finish lands after it count in it, so that every series ends with the log.
	lastBucket int
	rb         *requestBuilder
	prep       prepared // Replay's
	arena      []byte   // Replay's, for prep's values
	nat        natTracker
	legit      map[string]bool
	// slots are the store keys' slots; only prepare uses them, on the reading goroutine.
	slots keySlots
	// legitLens has bit n set when a legit value is n bytes long (n < 256); see legitLen.
	legitLens [4]uint64

	// sources are the sources prepare evaluates: addrSrc, then each domain's, from
	// domainAt[i] to domainAt[i+1].
	sources  []*policy.Source
	domainAt []int
	values   []string // the values of the domain being decided
	oks      []bool
	addrSrc  [2]*policy.Source // whole address and subnet, for the shared-NAT check

	// requests counts the records replayed, matched those some rule matched, wouldDeny and
	// denied those some rule would deny (any stage) and reject (given its stage).
	requests, matched, wouldDeny, denied, reordered int64
	firstReordered                                  string // FILE:LINE of the first reordered record
	ctx                                             context.Context
	// rec is the record being decided, for Config.Observer.
	rec *accesslog.Record
}

// New returns a Simulator for cfg.
func New(cfg Config) (*Simulator, error) {
	if cfg.Model == nil {
		return nil, errors.New("no policy model")
	}
	cfg.Gateways = max(cfg.Gateways, 1)
	if cfg.Gateways > MaxGateways {
		return nil, fmt.Errorf("%d gateways: at most %d", cfg.Gateways, MaxGateways)
	}
	if cfg.NATUsers <= 0 {
		cfg.NATUsers = 20
	}
	if cfg.TopN == 0 {
		cfg.TopN = 10
	}
	if cfg.Assign.Kind == "" {
		cfg.Assign.Kind = "round-robin"
	}
	s := &Simulator{
		cfg:        cfg,
		bucketMs:   1000,
		lastBucket: -1,
		rb:         newRequestBuilder(),
		nat:        natTracker{cap: max(cfg.NATUsers, 100), addrs: map[string]userSet{}},
		legit:      map[string]bool{},
		slots:      newKeySlots(),
		ctx:        context.Background(),
		addrSrc: [2]*policy.Source{{Key: "addr", Kind: policy.SourceRemoteAddress, Mask: policy.MaskNone},
			{Key: "subnet", Kind: policy.SourceRemoteAddress, Mask: policy.MaskSubnet}},
	}
	clock := engine.ClockFunc(func() int64 { return s.nowUs / 1000 })
	// Everything runs on the replay goroutine: requests, the events the dispatcher queues, Sweep.
	s.store, s.ideal = engine.NewSingleGoroutineMemory(clock), engine.NewSingleGoroutineMemory(clock)
	keys := map[string]bool{}
	for _, d := range cfg.Model.Domains {
		for _, src := range d.Sources {
			keys[src.Key] = true
		}
	}
	for _, v := range cfg.Legit {
		s.legit[v] = true
		if k, val, ok := strings.Cut(v, "="); ok && keys[k] {
			s.legit[val] = true
		}
	}
	for _, d := range cfg.Model.Domains {
		if cfg.Domain != "" && d.Name != cfg.Domain {
			continue
		}
		ds, err := newDomainSim(d)
		if err != nil {
			return nil, err
		}
		s.domains = append(s.domains, ds)
		for _, r := range d.Rules {
			s.rules = append(s.rules, ds.rules[r])
			for _, v := range r.Legit {
				s.legit[v] = true
			}
		}
	}
	for v := range s.legit {
		if n := len(v); n < len(s.legitLens)*64 {
			s.legitLens[n/64] |= 1 << (n % 64)
		}
	}
	s.sources = append(s.sources, s.addrSrc[:]...)
	for _, ds := range s.domains {
		s.domainAt = append(s.domainAt, len(s.sources))
		s.sources = append(s.sources, ds.d.Sources...)
	}
	s.domainAt = append(s.domainAt, len(s.sources))
	if cfg.Domain != "" && len(s.domains) == 0 {
		return nil, fmt.Errorf("no domain %q in the policies", cfg.Domain)
	}
	s.assign = &assigner{a: cfg.Assign, n: cfg.Gateways, byName: map[string]int{}}
	if cfg.Assign.Kind != "field" {
		for i := 0; i < cfg.Gateways; i++ {
			if _, err := s.addGatewayErr(gatewayName(i)); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func (s *Simulator) addGateway(name string) int {
	i, err := s.addGatewayErr(name)
	if err != nil {
		// The lease configuration was accepted for the first gateway; later ones cannot fail.
		return 0
	}
	return i
}

// addGatewayErr adds a virtual gateway with a lease manager per rule.
func (s *Simulator) addGatewayErr(name string) (int, error) {
	i := len(s.gateways)
	s.gateways = append(s.gateways, gateway{name: name})
	clock := engine.ClockFunc(func() int64 { return s.nowUs / 1000 })
	dispatch := engine.DispatchFunc(func(fn func(context.Context)) {
		s.seq++
		s.events.push(event{atUs: s.nowUs + s.cfg.Latency.draw(), seq: s.seq, fn: fn})
	})
	for _, rs := range s.rules {
		lc := rs.plan.Lease
		lc.Store, lc.Clock, lc.Dispatcher = meteredStore{s: s, inner: s.store, rs: rs}, clock, dispatch
		lc.SingleGoroutine = true
		mgr, err := engine.NewLeaseManager(lc)
		if err != nil {
			return 0, fmt.Errorf("rule %s/%s: %w", rs.plan.Domain, rs.rule.Name, err)
		}
		rs.gateway = append(rs.gateway, &gatewayRule{mgr: mgr})
	}
	return i, nil
}

// bucket is the series index of the current virtual time.
func (s *Simulator) bucket() int {
	b := int((s.nowUs/1000 - s.startMs) / s.bucketMs)
	if s.lastBucket >= 0 {
		return min(b, s.lastBucket)
	}
	return b
}

// advance moves virtual time to ms, landing store replies and running housekeeping on the way.
func (s *Simulator) advance(ms int64) error {
	target := ms * 1000
	for len(s.events) > 0 && s.events[0].atUs <= target {
		e := s.events.pop()
		s.nowUs = max(s.nowUs, e.atUs)
		e.fn(s.ctx)
	}
	s.nowUs = max(s.nowUs, target)
	for s.nowUs/1000 >= s.nextTick {
		if err := s.tick(); err != nil {
			return err
		}
	}
	for s.bucket() >= maxPoints {
		s.bucketMs *= 2
		for _, rs := range s.rules {
			rs.stats.halve()
		}
	}
	return nil
}

// tick runs once a virtual second. Each rule's lease managers are swept every lease TTL (at
// most every second), stranded tokens are sampled every 5 seconds, and store state past its TTL
// is expired every minute: each of these walks every live key, so they run no more often than
// the behaviour they model needs.
func (s *Simulator) tick() error {
	now := s.nowUs / 1000
	s.nextTick = now - now%1000 + 1000
	s.ticks++
	sample := s.ticks%5 == 0
	for _, rs := range s.rules {
		every := max(1, rs.rule.Lease.TTLMs/1000)
		if s.ticks%every == 0 {
			for _, g := range rs.gateway {
				if err := g.mgr.Sweep(s.ctx); err != nil {
					return fmt.Errorf("sweep: %w", err)
				}
			}
		}
		if sample {
			var stranded int64
			for _, g := range rs.gateway {
				stranded += g.mgr.Stranded()
			}
			rs.stats.out.StrandedMax = max(rs.stats.out.StrandedMax, stranded)
		}
	}
	if s.ticks%60 == 0 {
		s.store.Expire(now)
		s.ideal.Expire(now)
		for _, rs := range s.rules {
			rs.stats.prune(now - 2*engine.TTL(rs.plan.Limits))
		}
	}
	return nil
}

// Replay runs one record through the virtual fleet and the ideal engine.
func (s *Simulator) Replay(rec *accesslog.Record) error {
	s.arena = s.arena[:0]
	s.prepare(&s.prep, s.rb, rec, &s.arena)
	s.countUser(&s.nat, &s.prep)
	return s.replayPrepared(rec, &s.prep)
}

// countUser records the user of a prepared record behind its address and subnet in nat, for
// the shared-NAT check. Which users were seen behind an address does not depend on the replay,
// and only the report reads it, so Run counts on whichever goroutine has time (Run).
func (s *Simulator) countUser(nat *natTracker, p *prepared) {
	user := p.user
	if user == "" && p.fp != "" {
		nat.user = append(append(nat.user[:0], "fp:"...), p.fp...)
		user = unsafe.String(unsafe.SliceData(nat.user), len(nat.user)) // only its hash is kept
	}
	if user == "" {
		return
	}
	nat.withUser++
	h := userHash(user)
	for i := range s.addrSrc {
		if p.oks[i] {
			nat.seeHash(p.values[i], h)
		}
	}
}

// prepared is what the simulator needs of a record: its descriptor source values, the rules
// they select with their store keys, and the user and addresses the shared-NAT check counts.
// It is a pure function of the record, so Run works it out on the reading goroutine, beside
// the replay, which is left with the decisions themselves.
type prepared struct {
	// The replay, on another core, reads the fields up to oks, kept together, and the record
	// only when the gateway assignment needs one of its fields.
	timeMs int64 // the record's time
	// matched says whether any rule was selected; hits are the selections to decide, in
	// domain and shape order.
	matched bool
	hits    []hit
	key     []byte // scratch for building store keys
	// values and oks are the values of s.sources: the shared-NAT address forms (addrSrc),
	// then each domain's sources (Simulator.valuesAt).
	values []string
	oks    []bool
	// user is the JWT subject ("sub:" and it), else fp the TLS fingerprint (the user is then
	// "fp:" and it); "" when none.
	user, fp string
	entries  []policy.Entry // scratch
}

// hit is one rule a record selects with a descriptor of the rule's own shape.
type hit struct {
	domain int
	rs     *ruleSim
	shape  []int
	slot   *keySlot // of the store key
}

// prepare fills p for rec, building the request with rb. The values it builds view *arena
// (policy.Request.AppendValuesIn) as rec's strings may. Besides what New set up it uses only
// s.slots, so it may run on another goroutine than the replay, one goroutine at a time.
func (s *Simulator) prepare(p *prepared, rb *requestBuilder, rec *accesslog.Record, arena *[]byte) {
	req, tok := rb.build(rec)
	p.timeMs = rec.TimeMs
	p.user, p.fp = "", ""
	if tok != nil {
		p.user = tok.user
	}
	if p.user == "" {
		if fp, _ := lastHeader(req.HeaderList, "x-ja4"); fp != "" {
			p.fp = fp
		} else if fp, _ := lastHeader(req.HeaderList, "x-ja3"); fp != "" {
			p.fp = fp
		}
	}
	p.values, p.oks = req.AppendValuesIn(p.values[:0], p.oks[:0], s.sources, arena)
	s.selectRules(p)
}

// selectRules finds the rules p's values select, with their store keys (prepared.hits).
func (s *Simulator) selectRules(p *prepared) {
	p.matched, p.hits = false, p.hits[:0]
	for di, ds := range s.domains {
		values, oks := s.valuesAt(p, di)
		for _, shape := range ds.shapes {
			p.entries = p.entries[:0]
			ok := true
			for _, i := range shape {
				if !oks[i] {
					ok = false
					break
				}
				p.entries = append(p.entries, policy.Entry{Key: ds.d.Sources[i].Key, Value: values[i]})
			}
			if !ok {
				continue
			}
			rule, found := ds.d.Lookup(p.entries)
			if !found {
				continue
			}
			rs := ds.rules[rule]
			if rs == nil {
				continue
			}
			p.matched = true
			if len(shape) != rs.descriptorLen() {
				continue // the rule's own shape decides it; a shorter or longer one must not count twice
			}
			p.key = rs.plan.AppendKey(p.key[:0], p.entries)
			p.hits = append(p.hits, hit{domain: di, rs: rs, shape: shape, slot: s.slots.get(p.key, p.timeMs)})
		}
	}
}

// valuesAt returns domain di's source values and oks within p.
func (s *Simulator) valuesAt(p *prepared, di int) ([]string, []bool) {
	from, to := s.domainAt[di], s.domainAt[di+1]
	return p.values[from:to], p.oks[from:to]
}

// replayPrepared runs rec, prepared as p, through the virtual fleet and the ideal engine.
func (s *Simulator) replayPrepared(rec *accesslog.Record, p *prepared) error {
	t := p.timeMs
	if !s.started {
		s.started, s.startMs, s.nowUs, s.nextTick = true, t, t*1000, t
	}
	if t < s.nowUs/1000 {
		if s.reordered == 0 {
			s.firstReordered = fmt.Sprintf("%s:%d", rec.File, rec.Line)
		}
		s.reordered++
		t = s.nowUs / 1000
	}
	if err := s.advance(t); err != nil {
		return err
	}
	s.requests++
	g := s.assign.pick(s, rec)
	if g < 0 {
		return fmt.Errorf("--assign %s: more than %d distinct values, the next at %s:%d; a field that names gateways has a few",
			s.cfg.Assign, MaxGateways, rec.File, rec.Line)
	}
	var would, denied bool
	s.rec = rec
	for i := range p.hits {
		h := &p.hits[i]
		s.values, s.oks = s.valuesAt(p, h.domain)
		w, d, err := s.decide(s.domains[h.domain], h.rs, h.shape, h.slot, g)
		if err != nil {
			return err
		}
		would, denied = would || w, denied || d
	}
	if p.matched {
		s.matched++
	}
	if would {
		s.wouldDeny++
	}
	if denied {
		s.denied++
	}
	return nil
}
