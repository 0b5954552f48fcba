package enforcer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
)

// service implements the RLS v3 RateLimitService on an Enforcer.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	e *Enforcer
}

// ShouldRateLimit implements the RLS v3 protocol. See the package documentation for how
// descriptors are matched and decided.
//
// A call allocates its response in one piece (see reply) and builds store keys in a pooled
// buffer: gRPC marshals the response after the handler returns, so nothing the response
// references is ever reused.
func (s service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	e := s.e
	e.inflight.Add(1)
	defer e.inflight.Add(-1)
	if bad := validateRequest(req); bad != nil {
		e.mx.invalid.WithLabelValues(bad.reason).Inc()
		return nil, bad.err
	}
	cfg := e.cfg.Load()
	rp := newReply(len(req.Descriptors))
	resp := &rp.resp
	var seq uint64
	if e.journal != nil {
		seq = e.seq.Add(1)
	}
	kb := keyBufs.Get().(*keyBuf)
	defer kb.release()
	dom := cfg.domains[req.Domain]
	if dom == nil {
		// envoyproxy/ratelimit's behaviour: no domain, no limit, OK. Counted and logged, as a
		// misspelt domain turns limiting off.
		e.mx.unknown.see(req.Domain, e.clock.Now(), e.log)
	}
	only, onlyOK := failureModeOf(ctx)
	if dom != nil {
		// Before any descriptor is decided: the call is refused whole, as validateRequest refuses.
		if bad := dom.checkOverrides(req, only, onlyOK); bad != nil {
			e.mx.invalid.WithLabelValues(bad.reason).Inc()
			return nil, bad.err
		}
	}
	if len(req.Descriptors) > 1 && e.store.detach {
		// One store timeout for the whole request, not one per descriptor.
		ctx = withStoreBudget(ctx, time.Now().Add(e.store.timeout))
	}
	var choice, warned headerChoice
	for i, d := range req.Descriptors {
		st := resp.Statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		var rs *ruleState
		var ents [MaxEntries]policy.Entry
		if dom != nil {
			rs = dom.match(d, &ents, only, onlyOK)
		}
		if rs == nil {
			// envoyproxy/ratelimit's behaviour: no rule, no limit, OK.
			if dom != nil {
				dom.unmatched.Inc()
			}
			e.journalUnmatched(seq, i, req.Domain, cfg.gen)
			continue
		}
		cost := rs.plan.Cost
		if req.HitsAddend > 0 {
			cost = int64(req.HitsAddend)
		}
		if d.HitsAddend != nil && d.HitsAddend.Value > 0 {
			cost = int64(d.HitsAddend.Value)
		}
		limits, views := rs.plan.Limits, rs.views
		if d.Limit != nil {
			limits, views = rs.override(d.Limit)
		}
		kb.b = rs.appendKey(kb.b[:0], ents[:len(d.Entries)], d.Limit)
		v, unavailable := e.decide(ctx, rs, kb.b, limits, cost, seq, i, req.Domain, cfg.gen, d.Limit)
		if errors.Is(ctx.Err(), context.Canceled) {
			// The caller hung up (Envoy cancels the call when its client resets the stream):
			// no answer is wanted, and its verdict counts nothing. A store call it cut short
			// read as the store's failure: a bypass, or a fail-closed denial, and an alert.
			return nil, status.FromContextError(ctx.Err()).Err()
		}

		view := views[0]
		if v.Limiting > 0 && v.Limiting < len(views) {
			view = views[v.Limiting]
		}
		st.CurrentLimit = view.current
		st.LimitRemaining = uint32(min(max(v.Remaining, 0), 1<<32-1))
		st.DurationUntilReset.Seconds, st.DurationUntilReset.Nanos = v.ResetMs/1000, int32(v.ResetMs%1000)*1e6

		c := headerChoice{view: view, remaining: v.Remaining, resetMs: v.ResetMs}
		// The counts: a fail-closed verdict of an unavailable store is counted apart from the
		// limit's, at any stage, so that an outage does not read as traffic over its limits.
		switch {
		case !v.Over:
			rs.ok.Inc()
		case unavailable:
			rs.failedClosed.Inc()
		case rs.mode == policy.ModeEnforce:
			rs.over.Inc()
		case rs.mode == policy.ModeSoft:
			rs.softOver.Inc()
		default:
			rs.shadowOver.Inc()
			rs.shadowBlock.Inc()
			e.shadowEvent(rs, kb.b, cost)
		}
		// The answer: the stage decides what an over verdict does, whatever its cause.
		switch {
		case !v.Over:
		case rs.mode == policy.ModeEnforce:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			c.retryMs = max(v.RetryMs, 1)
		case rs.mode == policy.ModeSoft:
			c.warn = true
			c.overPct = overPercent(view.over.add(kb.b, cost, e.clock.Now()), view.requests)
			warned = c
		}
		// A shadow rule only watches: its limit is no business of the client's, and its
		// headers (r=0 for a limit nothing enforces) hid the enforced rule's.
		if rs.mode != policy.ModeShadow && c.better(&choice) {
			choice = c
		}
	}
	if choice.view != nil {
		rp.appendHeaders(&choice, e.legacy)
	}
	if warned.view != nil {
		rp.appendWarning(&warned)
	}
	return resp, nil
}

// failureModeOf returns the failure mode a call asked for with policy.FailureModeHeader, if it
// asked for a valid one. An unknown value is ignored, so that every descriptor is answered:
// answering too much never admits more than the policy allows. It reads the one key rather than
// metadata.FromIncomingContext, which copies every header of the call.
func failureModeOf(ctx context.Context) (policy.FailureMode, bool) {
	vs := metadata.ValueFromIncomingContext(ctx, policy.FailureModeHeader)
	if len(vs) != 1 {
		return "", false
	}
	switch m := policy.FailureMode(vs[0]); m {
	case policy.FailOpen, policy.FailClosed:
		return m, true
	}
	return "", false
}

// keyBuf is a reusable buffer for store keys; keyBufs pools them across calls.
type keyBuf struct{ b []byte }

var keyBufs = sync.Pool{New: func() any { return &keyBuf{b: make([]byte, 0, 256)} }}

// release returns kb to the pool, unless a huge key grew it: the pool should not keep the
// memory of the largest key any caller ever sent.
func (kb *keyBuf) release() {
	if cap(kb.b) <= 4096 {
		keyBufs.Put(kb)
	}
}

// decide asks the rule's plan for cost tokens of the key in kb, which applies the rule's failure
// mode when the store is unavailable, and counts the requests that mode admits. unavailable
// reports a denial of that mode: the store was unavailable and the rule fails closed. With a journal,
// the decision and its record are one section of the key's stripe (see order); without one it
// takes the key as bytes and does not allocate.
func (e *Enforcer) decide(ctx context.Context, rs *ruleState, kb []byte, limits []engine.Limit, cost int64,
	seq uint64, i int, domain string, gen int, override *commonv3.RateLimitDescriptor_RateLimitOverride) (v engine.Verdict, unavailable bool) {
	var err error
	if !e.order.exact() {
		u := engine.Unavailable{Fallback: e.fallback, RetryMs: e.unavailableRetryMs}
		v, err = rs.plan.DecideBytes(ctx, rs.lms[0], kb, limits, cost, u)
	} else {
		key := string(kb)
		stripe := e.order.index(key)
		now := e.order.lock(stripe)
		u := engine.Unavailable{Fallback: e.fallback, Now: now, RetryMs: e.unavailableRetryMs}
		v, err = rs.plan.Decide(ctx, rs.lms[stripe], key, limits, cost, u)
		e.journalDecision(now, seq, i, domain, gen, rs, key, cost, v, override)
		e.order.unlock(stripe)
	}
	if err == nil || errors.Is(err, engine.ErrBadRequest) || errors.Is(ctx.Err(), context.Canceled) {
		return v, false
	}
	e.log.Debug("store unavailable", "error", err)
	if !v.Over {
		if errors.Is(err, ErrCircuitOpen) {
			rs.bypassOpen.Inc()
		} else {
			rs.bypassError.Inc()
		}
	}
	return v, v.Via == engine.ViaFailClosed
}

// appendKey appends the store key of a descriptor matched by rs (engine.AppendRuleKey) to dst,
// followed by the limit override when there is one.
func (rs *ruleState) appendKey(dst []byte, ents []policy.Entry, override *commonv3.RateLimitDescriptor_RateLimitOverride) []byte {
	b := engine.AppendRuleKey(dst, rs.plan.Domain, rs.plan.Rule, ents)
	if override != nil {
		ms, _ := overrideWindowMs(override)
		// The part "override=<requests>/<ms>", escaped as engine.AppendKeyPart escapes it
		// (digits, '=' and '/' need no escaping).
		b = append(b, ":override="...)
		b = strconv.AppendUint(b, uint64(override.RequestsPerUnit), 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, ms, 10)
	}
	return b
}

// match returns the rule that descriptor d selects, or nil, writing its entries into ents: with
// onlyOK, only a rule of failure mode only (failureModeOf).
func (ds *domainState) match(d *commonv3.RateLimitDescriptor, ents *[MaxEntries]policy.Entry, only policy.FailureMode, onlyOK bool) *ruleState {
	for j, en := range d.Entries {
		ents[j] = policy.Entry{Key: en.Key, Value: en.Value}
	}
	if ri, ok := ds.d.LookupIndex(ents[:len(d.Entries)]); ok && (!onlyOK || ds.d.Rules[ri].FailureMode == only) {
		return ds.rules[ri]
	}
	return nil
}

// checkOverrides refuses a limit override that the rule its descriptor selects cannot enforce:
// one outside the engine's exact range (a million a year, say), which the engine refused at
// decision time, so that the request was denied with no word; and, on a sub-sharded rule, one
// of fewer requests than shards, each of which admits at least one.
func (ds *domainState) checkOverrides(req *rlsv3.RateLimitRequest, only policy.FailureMode, onlyOK bool) *invalid {
	for i, d := range req.Descriptors {
		o := d.Limit
		if o == nil {
			continue
		}
		var ents [MaxEntries]policy.Entry
		rs := ds.match(d, &ents, only, onlyOK)
		if rs == nil {
			continue
		}
		limits, _ := rs.override(o)
		ms, _ := overrideWindowMs(o)
		if shards := rs.plan.Shards; shards >= 2 && int64(o.RequestsPerUnit) < int64(shards) {
			return invalidf(reasonBadOverride, "descriptor %d: limit override of %d is fewer than rule %s's %d sub-shards, each of which admits at least 1",
				i, o.RequestsPerUnit, rs.name, shards)
		}
		if err := limits[0].Validate(); err != nil {
			return invalidf(reasonBadOverride, "descriptor %d: limit override of %d per %dms for rule %s: %v", i, o.RequestsPerUnit, ms, rs.name, err)
		}
	}
	return nil
}

// overrideForm is a limit override's limits and views, as ruleState.override builds them.
type overrideForm struct {
	limits []engine.Limit
	views  []*limitView
}

// maxOverrideForms bounds the overrides a rule keeps the form of: a gateway sends a few
// (Envoy's limit override comes from route metadata), while values that vary with the request
// should not grow the map without end; beyond the bound each is built for its request.
const maxOverrideForms = 256

// override returns the limits and views of a descriptor's limit override. The same override
// gets the same slice of limits every time, as a rule's own limits are: the lease manager holds
// a key to new limits when it is given another slice of other figures (a reload), and checks
// that on every request only by the slice's address.
func (rs *ruleState) override(o *commonv3.RateLimitDescriptor_RateLimitOverride) ([]engine.Limit, []*limitView) {
	ms, _ := overrideWindowMs(o)
	id := [2]int64{int64(o.RequestsPerUnit), ms}
	if f, ok := rs.overrides.Load(id); ok {
		f := f.(*overrideForm)
		return f.limits, f.views
	}
	f := rs.newOverrideForm(id)
	if rs.nOverrides.Load() < maxOverrideForms {
		if g, loaded := rs.overrides.LoadOrStore(id, f); loaded {
			f = g.(*overrideForm)
		} else {
			rs.nOverrides.Add(1)
		}
	}
	return f.limits, f.views
}

// newOverrideForm builds the form of the override of id[0] requests per id[1] ms. Its view says
// what the rule's own views say of enforcement in the soft stage.
func (rs *ruleState) newOverrideForm(id [2]int64) *overrideForm {
	// The view shows the override as given, as a rule's shows its limit before sub-sharding.
	v := newLimitView(rs.name, id[0], id[1])
	v.warnEnforce, v.warnTail = rs.views[0].warnEnforce, rs.views[0].warnTail
	return &overrideForm{limits: rs.plan.Override(id[0], id[1]), views: []*limitView{v}}
}

// overrideWindowMs converts an override's unit and multiplier to milliseconds. It reports false
// for an unknown unit, and for a multiplier whose window would overflow (a year times 300
// million wrapped to a negative window, or to a shorter one).
func overrideWindowMs(o *commonv3.RateLimitDescriptor_RateLimitOverride) (int64, bool) {
	var ms int64
	switch o.Unit {
	case typev3.RateLimitUnit_SECOND:
		ms = 1000
	case typev3.RateLimitUnit_MINUTE:
		ms = 60_000
	case typev3.RateLimitUnit_HOUR:
		ms = 3_600_000
	case typev3.RateLimitUnit_DAY:
		ms = 86_400_000
	case typev3.RateLimitUnit_MONTH:
		ms = 30 * 86_400_000
	case typev3.RateLimitUnit_YEAR:
		ms = 365 * 86_400_000
	default:
		return 0, false
	}
	if m := o.UnitMultiplier; m != nil && m.Value > 1 {
		if int64(m.Value) > math.MaxInt64/ms {
			return 0, false
		}
		ms *= int64(m.Value)
	}
	return ms, true
}

// shadowEvent logs a RateLimitShadowBlock event, at most one per rule per second; the events
// it skips are counted in the next one's "suppressed" (rate_limit_shadow_block_total counts
// them all).
func (e *Enforcer) shadowEvent(rs *ruleState, key []byte, cost int64) {
	now := time.Now().UnixMilli()
	last := rs.lastShadowLog.Load()
	if now-last < 1000 || !rs.lastShadowLog.CompareAndSwap(last, now) {
		rs.shadowSuppressed.Add(1)
		return
	}
	e.log.LogAttrs(context.Background(), slog.LevelInfo, "RateLimitShadowBlock",
		slog.String("event", "RateLimitShadowBlock"), slog.String("domain", rs.plan.Domain),
		slog.String("rule", rs.name), slog.String("key", logKey(key)), slog.Int64("cost", cost),
		slog.Int64("suppressed", rs.shadowSuppressed.Swap(0)))
}

// logKey is a store key as logs show it: a value that may be a credential, an identity of the
// api_key tier or the value of a descriptor key named like one (token, secret, password...), is
// replaced by the first 12 hex digits of its SHA-256, which still tells one caller from another.
// A log line must not hand out the API keys it was written about.
func logKey(key []byte) string {
	parts := strings.Split(string(key), ":")
	// "rl", domain, rule, then descriptor keys and values in turn (and ":shard:N" at the end).
	for i := 4; i < len(parts); i += 2 {
		k, v := strings.ToLower(parts[i-1]), parts[i]
		if rest, ok := strings.CutPrefix(v, "api_key%3A"); ok {
			parts[i] = "api_key%3A" + digest(rest)
			continue
		}
		for _, word := range []string{"key", "token", "secret", "passw", "auth", "cookie", "session"} {
			if strings.Contains(k, word) {
				parts[i] = digest(v)
				break
			}
		}
	}
	return strings.Join(parts, ":")
}

// digest is "#" and the first 12 hex digits of v's SHA-256.
func digest(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "#" + hex.EncodeToString(sum[:6])
}

// journalDecision writes a decision record when the journal is on.
func (e *Enforcer) journalDecision(now int64, seq uint64, i int, domain string, gen int, rs *ruleState, key string, cost int64,
	v engine.Verdict, override *commonv3.RateLimitDescriptor_RateLimitOverride) {
	if e.journal == nil {
		return
	}
	r := journal.DecisionOf(rs.plan.Rule, key, cost, v, rs.mode)
	r.TimeMs, r.Seq, r.Index, r.Domain, r.Gen = now, seq, i, domain, gen
	if override != nil {
		r.OverrideRequests = int64(override.RequestsPerUnit)
		r.OverrideMs, _ = overrideWindowMs(override)
	}
	e.journal.Write(r)
}

// journalUnmatched writes the record of a descriptor no rule matched when the journal is on.
func (e *Enforcer) journalUnmatched(seq uint64, i int, domain string, gen int) {
	if e.journal == nil {
		return
	}
	e.journal.Write(journal.Record{Kind: journal.KindDecision, TimeMs: e.clock.Now(), Seq: seq, Index: i, Gen: gen,
		Domain: domain, Via: journal.ViaUnmatched, Engine: journal.CodeOK, Code: journal.CodeOK})
}
