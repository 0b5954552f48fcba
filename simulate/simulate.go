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
	"errors"
	"fmt"
	"unsafe"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
)

// Config configures a Simulator.
type Config struct {
	Model *policy.Model
	// Domain limits the replay to one domain; empty means all.
	Domain string
	// Gateways is the number of virtual gateways, up to MaxGateways: 0 means 1. A field
	// assignment makes its own and ignores it.
	Gateways int
	// Assign picks each record's gateway: the zero Assignment is round-robin.
	Assign Assignment
	// Latency is the store's reply latency: the zero Latency is none.
	Latency Latency
	// NATUsers is K: a denial on an address or subnet key behind which at least K distinct
	// users (JWT subjects or TLS fingerprints) were seen is shared-NAT collateral. 0 means 20.
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

// Simulator replays records. Replay and Finish are not safe for concurrent use: feed it from
// one goroutine. Run replays a log on every core (run.go).
type Simulator struct {
	cfg     Config
	domains []*domainSim
	rules   []*ruleSim
	gw      *gatewaySet // the gateways so far
	assign  *assigner
	shards  [shardCount]*shard
	legit   legitSet

	// sources are the sources prepare evaluates: addrSrc, then each domain's, from
	// domainAt[i] to domainAt[i+1].
	sources  []*policy.Source
	claims   []string       // the JWT claims they read, which tokens keep (claimNames)
	builtins builtinHeaders // the headers they read that the log's own fields hold
	// gapHorizon is how many seconds of a gap in the log run their housekeeping one by one
	// (shard.ticks): enough for every lease to be given back and forgotten.
	gapHorizon int64
	domainAt   []int
	addrSrc    [2]*policy.Source // whole address and subnet, for the shared-NAT check

	// The sequencer's state (sequence): the replay's clock, its housekeeping ticks and the
	// width of its time buckets, which the shards follow.
	started  bool
	startMs  int64
	nowMs    int64
	nextTick int64 // ms of the next housekeeping tick
	ticks    int64 // the last tick's number
	bucketMs int64
	// strandedMax is each rule's most stranded tokens at a sampling tick, over all shards.
	strandedMax []int64

	// requests counts the records replayed, matched those some rule matched, wouldDeny and
	// denied those some rule would deny (any stage) and reject (given its stage); withUser
	// those with a user for the shared-NAT check.
	requests, matched, wouldDeny, denied, reordered, withUser int64
	firstReordered                                            string // FILE:LINE of the first reordered record

	// Replay's own.
	rb       *requestBuilder
	prep     prepared
	buf      prepBuffers
	all      *worker // runs every shard
	stranded []int64
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
	if cfg.Latency.original == "" {
		cfg.Latency, _ = ParseLatency("0", 1)
	}
	s := &Simulator{
		cfg:      cfg,
		bucketMs: 1000,
		gw:       &gatewaySet{},
		addrSrc: [2]*policy.Source{{Key: "addr", Kind: policy.SourceRemoteAddress, Mask: policy.MaskNone},
			{Key: "subnet", Kind: policy.SourceRemoteAddress, Mask: policy.MaskSubnet}},
	}
	keys := map[string]bool{}
	for _, d := range cfg.Model.Domains {
		for _, src := range d.Sources {
			keys[src.Key] = true
		}
	}
	for _, e := range cfg.Legit {
		s.legit.addEntry(e, keys)
	}
	for _, d := range cfg.Model.Domains {
		if cfg.Domain != "" && d.Name != cfg.Domain {
			continue
		}
		ds, err := newDomainSim(d)
		if err != nil {
			return nil, err
		}
		if len(s.domains) == maxDomains {
			return nil, fmt.Errorf("domain %s: more than %d domains: replay them in parts (--domain)", domainWhere(d), maxDomains)
		}
		if len(ds.shapes) > maxShapes {
			return nil, fmt.Errorf("domain %s: %d descriptor shapes, at most %d", domainWhere(d), len(ds.shapes), maxShapes)
		}
		ds.selectByClass()
		s.domains = append(s.domains, ds)
		for i, r := range d.Rules {
			rs := ds.rules[i]
			rs.index = len(s.rules)
			s.rules = append(s.rules, rs)
			for _, e := range r.Legit {
				s.legit.addEntry(e, keys)
			}
		}
	}
	if cfg.Domain != "" && len(s.domains) == 0 {
		return nil, fmt.Errorf("no domain %q in the policies", cfg.Domain)
	}
	if err := s.checkLeases(); err != nil {
		return nil, err
	}
	s.legit.seal()
	s.sources = append(s.sources, s.addrSrc[:]...)
	for _, ds := range s.domains {
		s.domainAt = append(s.domainAt, len(s.sources))
		s.sources = append(s.sources, ds.d.Sources...)
	}
	s.domainAt = append(s.domainAt, len(s.sources))
	s.claims = claimNames(s.sources)
	s.builtins = builtinHeadersOf(HeadersFor(cfg.Model))
	for _, rs := range s.rules {
		// A lease is given back at the first sweep after its TTL and forgotten at the first
		// after another TTL: four sweep periods and a second cover both.
		s.gapHorizon = max(s.gapHorizon, 4*rs.sweepEvery()+1)
	}
	s.rb = s.newBuilder()
	s.assign = &assigner{a: cfg.Assign, n: cfg.Gateways, byName: map[string]int{}}
	if cfg.Assign.Kind != "field" {
		for i := 0; i < cfg.Gateways; i++ {
			s.addGateway(gatewayName(i))
		}
	}
	for i := range s.shards {
		sh, err := newShard(s, i)
		if err != nil {
			return nil, err
		}
		s.shards[i] = sh
	}
	s.strandedMax = make([]int64, len(s.rules))
	s.stranded = make([]int64, len(s.rules))
	s.all = newWorker(s, 0, 1)
	return s, nil
}

// checkLeases makes a lease manager of each rule's lease settings, so that a setting the
// engine refuses fails New rather than the replay (shard.manager).
func (s *Simulator) checkLeases() error {
	clock := engine.ClockFunc(func() int64 { return 0 })
	for _, rs := range s.rules {
		lc := rs.plan.Lease
		lc.Store, lc.Clock, lc.SingleGoroutine = engine.NewSingleGoroutineMemory(clock), clock, true
		if _, err := engine.NewLeaseManager(lc); err != nil {
			return fmt.Errorf("rule %s: %w", ruleWhere(rs.plan.Domain, rs.rule), err)
		}
	}
	return nil
}

// addGateway adds a virtual gateway and returns its index.
func (s *Simulator) addGateway(name string) int {
	s.gw = s.gw.with(name, s.rules)
	return len(s.gw.names) - 1
}

// bucket is the series index of the sequencer's time.
func (s *Simulator) bucket() int { return int((s.nowMs - s.startMs) / s.bucketMs) }

// sequence places record rec, prepared as p, in the replay: the time it is replayed at (a
// record logged before an earlier one is replayed at the later time), the housekeeping tick
// before it, if one is due, and its gateway. It runs on one goroutine, record by record in
// log order; the shards then decide the record's hits on any goroutines.
func (s *Simulator) sequence(p *prepared, rec *accesslog.Record) error {
	t := p.timeMs
	if !s.started {
		s.started, s.startMs, s.nowMs, s.nextTick = true, t, t, t
	}
	if t < s.nowMs {
		if s.reordered == 0 {
			s.firstReordered = fmt.Sprintf("%s:%d", rec.File, rec.Line)
		}
		s.reordered++
		t = s.nowMs
	}
	s.nowMs, p.t, p.tick = t, t, 0
	if t >= s.nextTick {
		// One tick however long the gap since the last record, numbered by its second: it
		// runs what the gap's seconds would have (shard.tick).
		s.nextTick = t - t%1000 + 1000
		p.since, p.tick = s.ticks, (t-t%1000)/1000-(s.startMs-s.startMs%1000)/1000+1
		s.ticks = p.tick
	}
	// s.bucket() >= maxPoints, without its division: the time is never before startMs.
	for s.nowMs-s.startMs >= maxPoints*s.bucketMs {
		s.bucketMs *= 2
	}
	s.requests++
	p.n = s.requests
	g := s.assign.pick(s, rec)
	if g < 0 {
		return fmt.Errorf("--assign %s: more than %d distinct values (the next at %s:%d); field:NAME wants one value per gateway: use hash:%s to spread this field over --gateways",
			s.cfg.Assign, MaxGateways, rec.File, rec.Line, s.cfg.Assign.Field)
	}
	p.g = g
	return nil
}

// tally counts record p once the shards have decided its hits, and tells the observer of its
// denials, in log order.
func (s *Simulator) tally(p *prepared, rec *accesslog.Record) {
	var would, denied bool
	o := s.cfg.Observer
	for i := range p.hits {
		h := &p.hits[i]
		if !h.would {
			continue
		}
		would, denied = true, denied || h.denied
		if o != nil {
			o.Deny(Denial{File: rec.File, Line: rec.Line, Domain: h.rs.plan.Domain, Rule: h.rs.rule, Denied: h.denied,
				Identity: h.ks.display, Addr: h.ks.addr, Legit: h.legit})
		}
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
	if p.hasUser {
		s.withUser++
	}
}

// sampled folds the stranded tokens a sampling tick found in all shards into strandedMax, and
// zeroes n.
func (s *Simulator) sampled(n []int64) {
	for i, v := range n {
		s.strandedMax[i] = max(s.strandedMax[i], v)
		n[i] = 0
	}
}

// Replay runs one record through the virtual fleet and the ideal engine. An error (a field
// assignment past MaxGateways, a failure of the virtual store) ends the replay: Finish would
// report a part of it.
func (s *Simulator) Replay(rec *accesslog.Record) error {
	s.buf.reset()
	p := &s.prep
	s.prepare(p, s.rb, rec, &s.buf)
	return s.replayPrepared(p, rec)
}

// replayPrepared is Replay of record rec once prepared as p: it places the record, decides
// its hits in every shard on the calling goroutine and counts it.
func (s *Simulator) replayPrepared(p *prepared, rec *accesslog.Record) error {
	if err := s.sequence(p, rec); err != nil {
		return err
	}
	var stranded []int64
	if sampling(p.since, p.tick) {
		stranded = s.stranded
	}
	if err := s.all.record(p, s.gw, stranded); err != nil {
		return err
	}
	if stranded != nil {
		s.sampled(stranded)
	}
	s.tally(p, rec)
	return nil
}

// prepared is what the simulator needs of a record: its descriptor source values, the rules
// they select with their store keys' hashes, and the user and addresses the shared-NAT check
// counts.
// prepare works these out from the record alone, so Run prepares records on every core; the
// sequencer then fills in where the record goes (sequence), and the shards decide its hits.
type prepared struct {
	timeMs int64 // the record's time
	// matched says whether any rule was selected; hits are the selections to decide, in
	// domain and shape order. hits, values and oks view the prepBuffers prepare wrote them
	// into.
	matched bool
	hits    []hit
	// values and oks are the values of s.sources: the shared-NAT address forms (addrSrc),
	// then each domain's sources (Simulator.valuesAt).
	values []string
	oks    []bool
	// hasUser says the record has a user for the shared-NAT check, userHash its hash (the
	// JWT subject, "sub:" and it, else "fp:" and the TLS fingerprint); nat are the addrHashes
	// of its address and subnet where natOK.
	hasUser  bool
	userHash uint64
	nat      [2]uint64
	natOK    [2]bool

	// Set by sequence: the record's number (from 1), the time it is replayed at, the
	// housekeeping tick before it (0 for none) and the tick before that (since), and its
	// gateway. A tick is numbered by the second of the replay it falls in, from 1.
	n     int64
	t     int64
	tick  int64
	since int64
	g     int
	// sample is the index of the tick's stranded-token sample within Run's chunk, -1 for
	// none (runner.sequence).
	sample int
}

// domainWhere names d for an error: its name, and its file and line when known.
func domainWhere(d *policy.Domain) string {
	if pos := d.Pos.String(); pos != "" {
		return d.Name + " (" + pos + ")"
	}
	return d.Name
}

// ruleWhere names rule r of domain for an error about the policy: domain/rule, and where the
// rule is written when that is known.
func ruleWhere(domain string, r *policy.Rule) string {
	if pos := r.Pos.String(); pos != "" {
		return domain + "/" + r.Name + " (" + pos + ")"
	}
	return domain + "/" + r.Name
}

// maxDomains and maxShapes bound the domains a replay runs and the descriptor shapes (distinct
// lists of descriptor keys) of one domain, so that a hit names them in 16 bits.
const (
	maxDomains = 1 << 16
	maxShapes  = 1 << 16
)

// hit is one rule a record selects with a descriptor of the rule's own shape. It is packed
// into 40 bytes, so that a record's hits take few cache lines for the parsing goroutine to
// write, the shard workers to read and complete with the outcome, and merge to read.
type hit struct {
	rs       *ruleSim
	hash, id uint64    // the store key's hashes (storeKeyHashes)
	ks       *keyState // the key's state, set by shard.decide
	domain   uint16    // at most maxDomains (New)
	shape    uint16    // the descriptor's shape, in its domain's shapes: at most maxShapes
	shard    uint8     // shardOf(hash)
	// The outcome, set by shard.decide: the rule would deny the request, rejects it given its
	// stage on the gateway, a value of the request is marked legitimate.
	would, denied, legit bool
}

// prepBuffers is where prepare writes what it works out for a run of records (one of Run's
// chunks, say): each record's descriptor values and hits follow the previous record's, and
// the record's prepared views its part. The shard workers, on another core than
// the one that wrote them, read every record's hits (and write their outcomes) in log order:
// from a few arrays read straight through, rather than from four small slices per record
// scattered over the heap (ADR 0002). A buffer that grows leaves the views into its old array
// as they were: nothing writes to that array again but the holders of those views.
type prepBuffers struct {
	values []string
	oks    []bool
	hits   []hit
	arena  []byte // the bytes of the values that prepare builds (policy.Request.AppendValuesIn)
}

// since is what s holds from index at on, capped there: a record's view of a prepBuffers
// buffer, which an append to the view cannot spill out of.
func since[T any](s []T, at int) []T { return s[at:len(s):len(s)] }

// reset readies b for another run of records; what prepare wrote into it before must no
// longer be read.
func (b *prepBuffers) reset() {
	b.values, b.oks, b.hits, b.arena = b.values[:0], b.oks[:0], b.hits[:0], b.arena[:0]
}

// prepare fills p for rec, building the request with rb, and writes the values and hits p
// views into buf. The values it builds view buf's arena (policy.Request.AppendValuesIn) as
// rec's strings may. It reads only what New set up, so several goroutines may prepare records
// at once, each with its own rb and buf.
func (s *Simulator) prepare(p *prepared, rb *requestBuilder, rec *accesslog.Record, buf *prepBuffers) {
	req, tok := rb.build(rec)
	p.timeMs = rec.TimeMs
	p.hasUser, p.natOK = false, [2]bool{}
	var user string
	var uh uint64
	if tok != nil {
		user, uh = tok.user, tok.userHash
	}
	at := len(buf.values)
	buf.values, buf.oks = req.AppendValuesIn(buf.values, buf.oks, s.sources, &buf.arena)
	p.values, p.oks = since(buf.values, at), since(buf.oks, at)
	if user == "" {
		fp, _ := policy.LastHeader(req.HeaderList, "x-ja4")
		if fp == "" {
			fp, _ = policy.LastHeader(req.HeaderList, "x-ja3")
		}
		if fp != "" {
			rb.user = append(append(rb.user[:0], "fp:"...), fp...)
			user = unsafe.String(unsafe.SliceData(rb.user), len(rb.user)) // only its hash is kept
			uh = userHash(user)
		}
	}
	if user != "" {
		p.hasUser, p.userHash = true, uh
		for i := range s.addrSrc {
			if p.oks[i] {
				p.natOK[i], p.nat[i] = true, addrHash(p.values[i])
			}
		}
	}
	s.selectRules(p, rb, buf)
}

// selectRules finds the rules p's values select, with their store keys' hashes
// (prepared.hits).
func (s *Simulator) selectRules(p *prepared, rb *requestBuilder, buf *prepBuffers) {
	p.matched = false
	hitsAt := len(buf.hits)
	for di, ds := range s.domains {
		values, oks := s.valuesAt(p, di)
		rb.hashes.reset(len(values))
		classes, shapeEntries := rb.classes[di], rb.entries[di]
		for _, i := range ds.classed {
			if oks[i] {
				classes[i] = ds.sel.Class(i, values[i])
			}
		}
		for si, shape := range ds.shapes {
			ok := true
			for _, i := range shape {
				if !oks[i] {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			// The entries hold an earlier record's values until filled in: for LookupIndex on a
			// tuple of classes the table has not met, and for a hit's store key.
			entries := shapeEntries[si]
			ri, found, known := ds.sel.Select(si, classes)
			if !known {
				fillEntries(entries, shape, values)
				ri, found = ds.sel.Learn(si, classes, entries)
			}
			if !found {
				continue
			}
			rs := ds.rules[ri]
			p.matched = true
			if len(shape) != rs.descriptorLen() {
				continue // the rule's own shape decides it; a shorter or longer one must not count twice
			}
			if known {
				fillEntries(entries, shape, values)
			}
			h, id := rb.hashes.storeKeyHashes(rs, shape, entries)
			buf.hits = append(buf.hits, hit{rs: rs, hash: h, id: id, domain: uint16(di), shape: uint16(si), shard: uint8(shardOf(h))})
		}
	}
	p.hits = since(buf.hits, hitsAt)
}

// fillEntries sets the values of entries, a descriptor of shape, from a domain's values.
func fillEntries(entries []policy.Entry, shape []int, values []string) {
	for j, i := range shape {
		entries[j].Value = values[i]
	}
}

// newBuilder returns a builder of s's requests for one goroutine: its tokens keep the claims
// s's sources read, and it holds each descriptor shape's entries (shapeEntries).
func (s *Simulator) newBuilder() *requestBuilder {
	rb := newRequestBuilder(s.claims)
	rb.builtins = s.builtins
	rb.entries = s.shapeEntries()
	rb.classes = make([][]uint32, len(s.domains))
	for di, ds := range s.domains {
		rb.classes[di] = make([]uint32, len(ds.d.Sources))
	}
	return rb
}

// shapeEntries returns a descriptor's entries for each shape of each domain, by domain and shape,
// with their keys, for a requestBuilder to fill in the values of each request.
func (s *Simulator) shapeEntries() [][][]policy.Entry {
	out := make([][][]policy.Entry, len(s.domains))
	for di, ds := range s.domains {
		out[di] = make([][]policy.Entry, len(ds.shapes))
		for si, shape := range ds.shapes {
			out[di][si] = make([]policy.Entry, len(shape))
			for j, i := range shape {
				out[di][si][j].Key = ds.d.Sources[i].Key
			}
		}
	}
	return out
}

// valuesAt returns domain di's source values and oks within p.
func (s *Simulator) valuesAt(p *prepared, di int) ([]string, []bool) {
	from, to := s.domainAt[di], s.domainAt[di+1]
	return p.values[from:to], p.oks[from:to]
}

// users is the number of distinct users seen behind addr, and whether the count was capped.
func (s *Simulator) users(addr string) (int, bool) {
	h := addrHash(addr)
	return s.shards[shardOf(h)].nat.count(h)
}

// Finish lands the store replies still in flight, counts the tokens the leases still hold as
// each rule's StrandedEnd, and builds the report. It fails when a shard's store did.
func (s *Simulator) Finish() (*report.Report, error) {
	buckets, lastBucket := 0, -1
	if s.started {
		buckets = s.bucket() + 1
		lastBucket = buckets - 1
	}
	for _, sh := range s.shards {
		sh.finish(s.requests, s.nowMs, s.bucketMs, lastBucket)
		if err := sh.failed(); err != nil {
			return nil, err
		}
	}
	r := &report.Report{
		Requests: s.requests,
		StartMs:  s.startMs,
		EndMs:    s.nowMs,
		Settings: report.Settings{Gateways: len(s.gw.names), Assignment: s.cfg.Assign.String(),
			StoreLatency: s.cfg.Latency.String(), NATUsers: s.cfg.NATUsers, BucketMs: s.bucketMs},
	}
	r.Totals.Matched, r.Totals.RequestsWouldDeny, r.Totals.RequestsDenied = s.matched, s.wouldDeny, s.denied
	r.Reordered, r.FirstReordered, r.AssignMissing = s.reordered, s.firstReordered, s.assign.missing
	r.Totals.RequestsWithUser = s.withUser
	denied := make([][]*keyState, len(s.rules))
	for _, sh := range s.shards {
		sh.keys.each(func(ks *keyState) {
			if ks.denied() {
				denied[ks.rule] = append(denied[ks.rule], ks)
			}
		})
		r.DeniedKeysDropped += sh.droppedDenied
		r.NATUntracked += sh.nat.untracked
	}
	for i, rs := range s.rules {
		st := &ruleStats{out: rs.report()}
		for _, sh := range s.shards {
			st.merge(&sh.rules[i].stats)
		}
		st.out.StrandedMax = max(s.strandedMax[i], st.out.StrandedEnd)
		r.Rules = append(r.Rules, st.finish(denied[i], s.cfg.TopN, s.cfg.NATUsers, s.users, s.startMs, s.bucketMs, buckets))
	}
	r.Finish()
	if o := s.cfg.Observer; o != nil {
		o.Finish(s.users)
	}
	return r, nil
}
