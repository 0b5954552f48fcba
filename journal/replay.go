package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// Input is one journal to replay.
type Input struct {
	Name string
	R    io.Reader
}

// Report is the outcome of Replay. It is encoded as the JSON of `rlctl simulate --journal -o
// json` (schema rlctl.journal-replay/v1).
type Report struct {
	Schema     string     `json:"schema"`
	Journals   []Summary  `json:"journals"`
	Decisions  int64      `json:"decisions"`
	Mismatches []Mismatch `json:"mismatches"`
}

// ReportSchema is Report.Schema.
const ReportSchema = "rlctl.journal-replay/v1"

// Summary describes one replayed journal.
type Summary struct {
	Name       string `json:"name"`
	Instance   string `json:"instance"`
	Decisions  int64  `json:"decisions"`
	Mismatches int    `json:"mismatches"`
	// Ended reports that the journal ends with its enforcer's graceful shutdown, so that the
	// tokens it returned were compared too.
	Ended bool `json:"ended"`
	// Dropped is the number of records the enforcer could not write.
	Dropped uint64 `json:"dropped"`
	// CutLine is the line number of a last line cut off mid-write (the enforcer stopped
	// without a graceful shutdown); it was not replayed. 0 when the journal is whole.
	CutLine int `json:"cut_line,omitempty"`
}

// Mismatch is one place where the replay differs from the journal.
type Mismatch struct {
	Journal  string `json:"journal"`
	Line     int    `json:"line"`
	Instance string `json:"instance"`
	// What is "decision" (a decision came out differently: Recorded and Replayed say how),
	// "store" (the replay's store calls differ from the journal's) or "journal" (the journal
	// cannot be replayed exactly).
	What     string   `json:"what"`
	Key      string   `json:"key,omitempty"`
	Rule     string   `json:"rule,omitempty"`
	Recorded *Outcome `json:"recorded,omitempty"`
	Replayed *Outcome `json:"replayed,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// Outcome is what Replay compares of a decision record.
type Outcome struct {
	Rule      string `json:"rule"`
	Stage     string `json:"stage,omitempty"`
	Engine    string `json:"eng"`
	Code      string `json:"code"`
	Via       string `json:"via"`
	Remaining int64  `json:"rem"`
	ResetMs   int64  `json:"reset"`
}

func outcomeOf(r *Record) Outcome {
	return Outcome{Rule: r.Rule, Stage: r.Stage, Engine: r.Engine, Code: r.Code, Via: r.Via, Remaining: r.Remaining, ResetMs: r.ResetMs}
}

// String formats o as "eng=over code=over via=store rem=0 reset=500".
func (o Outcome) String() string {
	s := fmt.Sprintf("eng=%s code=%s via=%s rem=%d reset=%d", o.Engine, o.Code, o.Via, o.Remaining, o.ResetMs)
	if o.Stage != "" {
		s += " stage=" + o.Stage
	}
	return s
}

// String formats m as one line: "FILE:LINE: instance I: key K: rule R: recorded ...; replayed ...".
func (m Mismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: instance %s: %s", m.Journal, m.Line, m.Instance, m.What)
	if m.Key != "" {
		fmt.Fprintf(&b, ": key %s", m.Key)
	}
	if m.Rule != "" {
		fmt.Fprintf(&b, ": rule %s", m.Rule)
	}
	if m.Recorded != nil && m.Replayed != nil {
		fmt.Fprintf(&b, ": recorded %s; replayed %s", m.Recorded, m.Replayed)
	}
	if m.Reason != "" {
		fmt.Fprintf(&b, ": %s", m.Reason)
	}
	return b.String()
}

// Replay re-runs every journal through the engine and reports each decision that comes out
// differently. models are the policies the journals' config records may name, each found by its
// policy.ContentHash.
//
// Each journal is one enforcer instance and is replayed on its own, as its enforcer ran: the
// same rule plans (engine.PlanRule) and stages (policy.Rule.Mode of the journal's instance),
// the same lease managers (one per lease setting and stripe), and the decision path itself
// (engine.RulePlan.Decide, journal.DecisionOf). Only the store and the clock are the journal's:
// a take is answered with its journaled reply, a prefetch's reply lands where the journal
// recorded it, and every engine time is the record's. Because a version 2 journal orders the
// records of each key as they changed its lease (see Order), a replay that differs means the
// engine's code or the policy differ from what the enforcer ran.
//
// An unreadable journal, one written before version 2, or a config record naming none of
// models is an error.
func Replay(ctx context.Context, models []*policy.Model, inputs []Input) (*Report, error) {
	byVersion := map[string]*policy.Model{}
	for _, m := range models {
		v, err := policy.ContentHash(m)
		if err != nil {
			return nil, fmt.Errorf("journal: replay: %w", err)
		}
		byVersion[v] = m
	}
	rep := &Report{Schema: ReportSchema, Journals: []Summary{}, Mismatches: []Mismatch{}}
	for _, in := range inputs {
		if err := replayOne(ctx, byVersion, in, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func replayOne(ctx context.Context, models map[string]*policy.Model, in Input, rep *Report) error {
	jr, err := NewReader(in.R)
	if err != nil {
		return fmt.Errorf("%s: %w", in.Name, err)
	}
	h := jr.Header()
	if h.Version < 2 || h.Stripes < 1 {
		return fmt.Errorf("%s: journal version %d is not ordered for an exact replay; version 2 is", in.Name, h.Version)
	}
	r := newReplayer(ctx, in.Name, h, models, rep)
	defer r.release()
	for {
		rec, err := jr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in.Name, err)
		}
		r.line = jr.Line()
		if err := r.apply(&rec); err != nil {
			return fmt.Errorf("%s:%d: %w", in.Name, r.line, err)
		}
	}
	r.sum.CutLine = jr.Cut()
	r.finish()
	rep.Journals = append(rep.Journals, r.sum)
	rep.Decisions += r.sum.Decisions
	return nil
}

// replayer replays one journal. Its lease managers run on the replayer's goroutine, except the
// prefetches they dispatch, which wait in the store for their journaled reply (see dispatch);
// the replayer waits for each to finish before it reads on, so only one goroutine runs at a time.
type replayer struct {
	ctx      context.Context
	name     string
	header   Header
	models   map[string]*policy.Model
	rep      *Report
	sum      Summary
	line     int
	clock    atomic.Int64
	fallback *engine.Memory
	configs  map[int]*replayConfig
	managers map[policy.Lease][]*engine.LeaseManager

	syncReplies map[string][]reply // journaled synchronous takes, for the key's next decision
	parked      map[string][]*prefetch
	returned    map[string]int64 // tokens the replay gave back, by key
	journaled   map[string]int64 // tokens the journal gave back, by key
}

// reply is a journaled store reply.
type reply struct {
	rec  Record
	line int
}

// replayConfig is one config generation's rules.
type replayConfig struct {
	rules map[string]map[string]*replayRule // by domain, then name
}

type replayRule struct {
	plan *engine.RulePlan
	mode policy.Mode
	lms  []*engine.LeaseManager // per stripe
}

func newReplayer(ctx context.Context, name string, h Header, models map[string]*policy.Model, rep *Report) *replayer {
	return &replayer{
		ctx: ctx, name: name, header: h, models: models, rep: rep,
		sum:         Summary{Name: name, Instance: h.Instance},
		fallback:    engine.NewMemory(nil),
		configs:     map[int]*replayConfig{},
		managers:    map[policy.Lease][]*engine.LeaseManager{},
		syncReplies: map[string][]reply{},
		parked:      map[string][]*prefetch{},
		returned:    map[string]int64{},
		journaled:   map[string]int64{},
	}
}

// apply replays one record.
func (r *replayer) apply(rec *Record) error {
	switch rec.Kind {
	case KindConfig:
		return r.config(rec)
	case KindDecision:
		r.sum.Decisions++
		return r.decision(rec)
	case KindStore:
		r.store(rec)
	case KindSweep:
		r.clock.Store(rec.TimeMs)
		for _, ms := range r.managers {
			if rec.Stripe >= 0 && rec.Stripe < len(ms) {
				_ = ms[rec.Stripe].Sweep(r.ctx) // returns are compared at the end
			}
		}
	case KindEnd:
		r.end(rec)
	}
	return nil
}

// config compiles the model a config record names, as the enforcer's reload did.
func (r *replayer) config(rec *Record) error {
	m := r.models[rec.ConfigVersion]
	if m == nil {
		return fmt.Errorf("config %s (generation %d) is none of the given policies (given: %s)",
			rec.ConfigVersion, rec.Gen, strings.Join(slices.Sorted(maps.Keys(r.models)), ", "))
	}
	rc := &replayConfig{rules: map[string]map[string]*replayRule{}}
	for _, d := range m.Domains {
		rules := map[string]*replayRule{}
		for _, pr := range d.Rules {
			plan, err := engine.PlanRule(d.Name, pr)
			if err != nil {
				return fmt.Errorf("domain %q: rule %q: %w", d.Name, pr.Name, err)
			}
			lms, err := r.leaseManagers(pr.Lease, plan.Lease)
			if err != nil {
				return fmt.Errorf("domain %q: rule %q: lease: %w", d.Name, pr.Name, err)
			}
			rules[pr.Name] = &replayRule{plan: plan, mode: pr.Mode(r.header.Instance), lms: lms}
		}
		rc.rules[d.Name] = rules
	}
	r.configs[rec.Gen] = rc
	return nil
}

// leaseManagers returns the managers, one per stripe, of lease settings p, as the enforcer
// keeps them: across config generations.
func (r *replayer) leaseManagers(p policy.Lease, cfg engine.LeaseConfig) ([]*engine.LeaseManager, error) {
	if ms := r.managers[p]; ms != nil {
		return ms, nil
	}
	ms := make([]*engine.LeaseManager, r.header.Stripes)
	for i := range ms {
		c := cfg
		c.Store, c.Clock, c.Dispatcher = replayStore{r}, engine.ClockFunc(r.clock.Load), engine.DispatchFunc(r.dispatch)
		m, err := engine.NewLeaseManager(c)
		if err != nil {
			return nil, err
		}
		ms[i] = m
	}
	r.managers[p] = ms
	return ms, nil
}

// decision re-runs one decision record and compares the outcome.
func (r *replayer) decision(rec *Record) error {
	if rec.Via == ViaUnmatched {
		return nil
	}
	rc := r.configs[rec.Gen]
	if rc == nil {
		// The enforcer drops records rather than slow a request (unless --journal-block), and a
		// dropped config record leaves its decisions without a policy: say so, as the end
		// record's count of dropped records comes too late to.
		return fmt.Errorf("decision of config generation %d, which no earlier config record names: the journal lost that record (an enforcer without --journal-block drops records when its journal falls behind)", rec.Gen)
	}
	rule := rc.rules[rec.Domain][rec.Rule]
	if rule == nil {
		r.mismatch(Mismatch{What: "decision", Key: rec.Key, Rule: rec.Rule,
			Reason: fmt.Sprintf("the config has no rule %q in domain %q", rec.Rule, rec.Domain)})
		return nil
	}
	p := rule.plan
	limits := p.Limits
	if rec.OverrideRequests != 0 || rec.OverrideMs != 0 {
		limits = p.Override(rec.OverrideRequests, rec.OverrideMs)
	}
	r.clock.Store(rec.TimeMs)
	lm := rule.lms[engine.ShardOf(rec.Key, r.header.Stripes)]
	v, _ := p.Decide(r.ctx, lm, rec.Key, limits, rec.Cost,
		engine.Unavailable{Fallback: r.fallback, Now: rec.TimeMs, RetryMs: r.header.UnavailableRetryMs})
	got := DecisionOf(p.Rule, rec.Key, rec.Cost, v, rule.mode)
	if want, have := outcomeOf(rec), outcomeOf(&got); want != have {
		r.mismatch(Mismatch{What: "decision", Key: rec.Key, Rule: rec.Rule, Recorded: &want, Replayed: &have})
	}
	if left := r.syncReplies[rec.Key]; len(left) > 0 {
		delete(r.syncReplies, rec.Key)
		r.mismatch(Mismatch{What: "store", Key: rec.Key, Rule: rec.Rule, Reason: fmt.Sprintf(
			"the journal has a synchronous take at line %d that the replayed decision did not make", left[0].line)})
	}
	return nil
}

// store files a store reply: a synchronous take waits for its key's next decision, a
// prefetch's reply lands now, and returns are summed.
func (r *replayer) store(rec *Record) {
	switch {
	case rec.Op == OpReturn:
		r.journaled[rec.Key] += rec.Got
	case !rec.Async:
		r.syncReplies[rec.Key] = append(r.syncReplies[rec.Key], reply{*rec, r.line})
	default:
		q := r.parked[rec.Key]
		if len(q) == 0 {
			r.mismatch(Mismatch{What: "store", Key: rec.Key, Reason: "the journal has a prefetch reply that the replay did not ask for"})
			return
		}
		pf := q[0]
		if len(q) == 1 {
			delete(r.parked, rec.Key)
		} else {
			r.parked[rec.Key] = q[1:]
		}
		r.checkRequest(pf.req, rec)
		r.clock.Store(rec.LocalMs)
		pf.reply <- *rec
		<-pf.done
	}
}

// checkRequest reports a take whose request differs from the journaled one.
func (r *replayer) checkRequest(req engine.TakeRequest, rec *Record) {
	if req.Want != rec.Want || req.Min != rec.Min {
		r.mismatch(Mismatch{What: "store", Key: rec.Key, Reason: fmt.Sprintf(
			"the replay asked for %d (at least %d) tokens, the journal for %d (at least %d)", req.Want, req.Min, rec.Want, rec.Min)})
	}
}

// end closes the lease managers, as the enforcer's graceful shutdown did, and compares the
// tokens given back per key.
func (r *replayer) end(rec *Record) {
	r.sum.Ended, r.sum.Dropped = true, rec.Dropped
	if rec.Dropped > 0 {
		r.mismatch(Mismatch{What: "journal", Reason: fmt.Sprintf(
			"the enforcer dropped %d records while writing this journal (rlctl-enforcer --journal-block keeps them)", rec.Dropped)})
	}
	r.release()
	r.clock.Store(rec.TimeMs)
	for _, ms := range r.managers {
		for _, m := range ms {
			_ = m.Close(r.ctx)
		}
	}
	keys := make([]string, 0, len(r.returned)+len(r.journaled))
	for k := range r.returned {
		keys = append(keys, k)
	}
	for k := range r.journaled {
		if _, ok := r.returned[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got, want := r.returned[k], r.journaled[k]; got != want {
			r.mismatch(Mismatch{What: "store", Key: k, Reason: fmt.Sprintf(
				"the journal gave back %d tokens in all, the replay %d", want, got)})
		}
	}
}

// finish reports what the journal left open.
func (r *replayer) finish() {
	for k, q := range r.syncReplies {
		r.mismatch(Mismatch{What: "store", Key: k, Line: q[0].line,
			Reason: "the journal has a synchronous take that no decision follows"})
	}
	r.syncReplies = map[string][]reply{}
}

// release answers the prefetches still waiting for a reply the journal does not have, so that
// their goroutines end. At the end of a journal written by a graceful shutdown there are none.
func (r *replayer) release() {
	keys := make([]string, 0, len(r.parked))
	for k := range r.parked {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, pf := range r.parked[k] {
			if r.sum.Ended {
				r.mismatch(Mismatch{What: "store", Key: k, Reason: "the replay made a prefetch whose reply the journal does not have"})
			}
			pf.reply <- Record{Err: errNoReply.Error()}
			<-pf.done
		}
	}
	r.parked = map[string][]*prefetch{}
}

func (r *replayer) mismatch(m Mismatch) {
	m.Journal, m.Instance = r.name, r.header.Instance
	if m.Line == 0 {
		m.Line = r.line
	}
	r.sum.Mismatches++
	r.rep.Mismatches = append(r.rep.Mismatches, m)
}

// prefetch is a dispatched store call waiting in the replay store for its journaled reply.
type prefetch struct {
	req    engine.TakeRequest
	parked chan struct{} // the call reached the store
	reply  chan Record
	done   chan struct{} // the dispatched function returned
}

type prefetchKey struct{}

// dispatch runs fn, a prefetch or a return, on a goroutine and waits until it has either
// finished (a return, which the store sums) or reached the store with a take (a prefetch),
// which then waits for the journal's reply (see store). Nothing else runs meanwhile, so the
// replay stays deterministic.
func (r *replayer) dispatch(fn func(context.Context)) {
	pf := &prefetch{parked: make(chan struct{}), reply: make(chan Record), done: make(chan struct{})}
	ctx := context.WithValue(r.ctx, prefetchKey{}, pf)
	go func() {
		defer close(pf.done)
		fn(ctx)
	}()
	select {
	case <-pf.parked:
		r.parked[pf.req.Key] = append(r.parked[pf.req.Key], pf)
	case <-pf.done:
	}
}

// errNoReply answers a take the journal has no reply for.
var errNoReply = errors.New("journal replay: the journal has no reply for this take")

// replayStore answers the lease managers from the journal.
type replayStore struct{ r *replayer }

// Take implements engine.Store.
func (s replayStore) Take(ctx context.Context, req engine.TakeRequest) (engine.Result, error) {
	if pf, ok := ctx.Value(prefetchKey{}).(*prefetch); ok {
		pf.req = req
		close(pf.parked)
		rec := <-pf.reply
		return result(&rec)
	}
	r := s.r
	q := r.syncReplies[req.Key]
	if len(q) == 0 {
		r.mismatch(Mismatch{What: "store", Key: req.Key, Reason: fmt.Sprintf(
			"the replay took %d (at least %d) tokens synchronously; the journal has no such take", req.Want, req.Min)})
		return engine.Result{}, errNoReply
	}
	if len(q) == 1 {
		delete(r.syncReplies, req.Key)
	} else {
		r.syncReplies[req.Key] = q[1:]
	}
	r.checkRequest(req, &q[0].rec)
	return result(&q[0].rec)
}

// Return implements engine.Store.
func (s replayStore) Return(_ context.Context, req engine.ReturnRequest) error {
	s.r.returned[req.Key] += req.N
	return nil
}

// result is the engine's form of a journaled take reply.
func result(rec *Record) (engine.Result, error) {
	if rec.Err != "" {
		if strings.HasPrefix(rec.Err, engine.ErrBadRequest.Error()) {
			return engine.Result{}, fmt.Errorf("%w%s", engine.ErrBadRequest, strings.TrimPrefix(rec.Err, engine.ErrBadRequest.Error()))
		}
		if rec.Err == context.Canceled.Error() {
			// The caller hung up: the engine spends no fallback for it (RulePlan.Decide).
			return engine.Result{}, context.Canceled
		}
		return engine.Result{}, errors.New(rec.Err)
	}
	return engine.Result{Granted: rec.Got, Remaining: rec.Remaining, RetryAfter: rec.RetryMs, ResetAfter: rec.ResetMs, Now: rec.TimeMs}, nil
}
