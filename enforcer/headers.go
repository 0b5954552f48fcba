package enforcer

import (
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlctl/rlctl/policy"
)

// The soft stage's warning header. A request over its limit that a rule admits because it is in
// soft (or in canary on an instance outside the canary's share) gets
//
//	RateLimit-Warning: "rule";q=100;w=60;over=20;enforce="2025-06-27";msg="20% over quota, admitted; enforcement begins 2025-06-27"
//
// an RFC 8941 item (the rule's name) with parameters, so a structured-field parser reads it:
//
//   - q and w are the limit's requests and window in seconds, as in RateLimit-Policy;
//   - over is how far over its quota the caller is, in whole percent rounded up: the tokens it
//     asked for beyond the limit in the current window (a fixed window of w aligned to the Unix
//     epoch, kept per instance), times 100, over q. It counts from the window's start, so it grows
//     while the caller stays over. Callers are told apart by a hash of their key into 64 slots
//     per limit, so two callers may share a count: the figure may be high, never low;
//   - enforce is the day (YYYY-MM-DD, UTC) enforcement begins: the soft stage's since plus the
//     domain's soft dwell, rounded up to a whole day. In canary it is the canary's since, the day
//     a share of the fleet began to enforce. It is left out when no date is set: no since, no
//     soft dwell, or a hold on the stage. It is a function of the snapshot only, never of the
//     clock, so every instance and every replay gives the same date;
//   - msg says the same for people.

// overSlots is the number of callers per limit whose overage is counted apart.
const overSlots = 64

// overMeter counts, per caller (a slot chosen by a hash of its key), the tokens asked for over a
// limit in the current window. Each slot holds the window's number in its high 32 bits and the
// count in its low 32 bits, so one atomic word resets and counts.
type overMeter struct {
	windowMs int64
	slots    [overSlots]atomic.Uint64
}

// add counts cost over-limit tokens of the caller with key at nowMs (Unix ms) and returns the
// caller's count in the current window, this request included.
func (m *overMeter) add(key []byte, cost, nowMs int64) int64 {
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	slot := &m.slots[h%overSlots]
	win := uint64(uint32(nowMs / max(m.windowMs, 1)))
	add := uint64(min(max(cost, 0), 1<<31))
	for {
		old := slot.Load()
		n := add
		if old>>32 == win {
			n = min(old&(1<<32-1)+add, 1<<32-1)
		}
		if slot.CompareAndSwap(old, win<<32|n) {
			return int64(n)
		}
	}
}

// overPercent is tokens over a limit of requests, in whole percent rounded up.
func overPercent(tokens, requests int64) int64 {
	if requests <= 0 {
		return 0
	}
	return (tokens*100 + requests - 1) / requests
}

// softNotice is what the warning of rule r says about enforcement: the enforce parameter (empty
// when no date is set) and the end of msg, after the percentage.
func softNotice(d *policy.Domain, r *policy.Rule) (enforce, tail string) {
	const none = "% over quota, admitted; no enforcement date is set"
	st := r.Stage
	since, err := time.Parse(time.DateOnly, st.Since)
	if err != nil || st.Hold != "" {
		return "", none
	}
	switch st.Name {
	case policy.StageSoft:
		dwell := d.Dwell(policy.StageSoft)
		if dwell <= 0 {
			return "", none
		}
		const day = int64(24 * time.Hour / time.Millisecond)
		date := since.AddDate(0, 0, int((dwell+day-1)/day)).Format(time.DateOnly)
		return `;enforce="` + date + `"`, "% over quota, admitted; enforcement begins " + date
	case policy.StageCanary:
		return `;enforce="` + st.Since + `"`, "% over quota, admitted here; enforced on " +
			strconv.Itoa(st.CanaryPercent) + "% of instances since " + st.Since
	}
	return "", none
}

// setSoftNotice sets what v's warnings say about enforcement of rule r of domain d.
func (v *limitView) setSoftNotice(d *policy.Domain, r *policy.Rule) {
	v.warnEnforce, v.warnTail = softNotice(d, r)
}

// Response header names.
const (
	HeaderPolicy          = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderRetryAfter      = "Retry-After"
	HeaderWarning         = "RateLimit-Warning"
	HeaderLegacyLimit     = "X-RateLimit-Limit"
	HeaderLegacyRemaining = "X-RateLimit-Remaining"
	HeaderLegacyReset     = "X-RateLimit-Reset"
)

// limitView is what responses say about one limit of one rule. It is built once per config and
// shared by every response: protobuf messages are safe to marshal concurrently, and sharing
// them keeps the request path from allocating them.
type limitView struct {
	requests, windowMs int64
	// current is the DescriptorStatus.current_limit.
	current *rlsv3.RateLimitResponse_RateLimit
	// policy is `RateLimit-Policy: "rule";q=100;w=60` (draft-ietf-httpapi-ratelimit-headers).
	policy *corev3.HeaderValue
	// legacyLimit is `X-RateLimit-Limit: 100, 100;w=60`.
	legacyLimit *corev3.HeaderValue
	// warnPrefix, warnEnforce and warnTail are the fixed parts of the soft stage's
	// RateLimit-Warning (see appendWarning), and over counts each caller's overage.
	warnPrefix, warnEnforce, warnTail string
	over                              *overMeter
	// quotedName is the rule name as a structured-field string, for the RateLimit header.
	quotedName string
}

func newLimitView(rule string, requests, windowMs int64) *limitView {
	w := ceilSeconds(windowMs)
	name := sfString(rule)
	unit, mult := rlsUnit(windowMs)
	current := &rlsv3.RateLimitResponse_RateLimit{
		Name:            rule,
		RequestsPerUnit: uint32(min(requests, 1<<32-1)),
		Unit:            unit,
	}
	if mult != 1 {
		current.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	q := strconv.FormatInt(requests, 10)
	ws := strconv.FormatInt(w, 10)
	return &limitView{
		requests:    requests,
		windowMs:    windowMs,
		current:     current,
		quotedName:  name,
		policy:      &corev3.HeaderValue{Key: HeaderPolicy, Value: name + ";q=" + q + ";w=" + ws},
		legacyLimit: &corev3.HeaderValue{Key: HeaderLegacyLimit, Value: q + ", " + q + ";w=" + ws},
		warnPrefix:  name + ";q=" + q + ";w=" + ws + ";over=",
		warnTail:    "% over quota, admitted; no enforcement date is set",
		over:        &overMeter{windowMs: windowMs},
	}
}

// rlsUnit expresses windowMs as an RLS unit and multiplier: the largest whole unit that divides
// it, seconds (rounded up) otherwise.
func rlsUnit(windowMs int64) (rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	for _, u := range []struct {
		ms   int64
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{86_400_000, rlsv3.RateLimitResponse_RateLimit_DAY},
		{3_600_000, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{60_000, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{1000, rlsv3.RateLimitResponse_RateLimit_SECOND},
	} {
		if windowMs%u.ms == 0 {
			return u.unit, uint32(min(windowMs/u.ms, 1<<32-1))
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND, uint32(min(ceilSeconds(windowMs), 1<<32-1))
}

// sfString quotes s as an RFC 8941 structured-field string, dropping characters it cannot hold.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20 && c < 0x7f:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// ceilSeconds is ms in whole seconds, rounded up, and at least 0.
func ceilSeconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}

// headerChoice is the descriptor whose limit the response headers describe: the most
// restrictive one. Of rejected descriptors (any rejected one before the others), the one whose
// retry is furthest, since Retry-After must outlast every limit the request is over; of the
// others, the one with the fewest remaining tokens; the later reset on ties.
type headerChoice struct {
	view      *limitView
	remaining int64
	resetMs   int64
	retryMs   int64 // > 0 when the descriptor is rejected
	warn      bool  // over the limit in the soft stage
	overPct   int64 // with warn: how far over its quota the caller is, in percent
}

// better reports whether c is more restrictive than o.
func (c *headerChoice) better(o *headerChoice) bool {
	if o.view == nil {
		return true
	}
	if (c.retryMs > 0) != (o.retryMs > 0) {
		return c.retryMs > 0
	}
	if c.retryMs != o.retryMs {
		return c.retryMs > o.retryMs
	}
	if c.remaining != o.remaining {
		return c.remaining < o.remaining
	}
	return c.resetMs > o.resetMs
}

// reply is one call's response with everything it points to, allocated in one piece: the
// statuses and their durations (inline for one descriptor, the usual case), the header list
// and the headers whose values vary per call, with the bytes of those values. It is never
// reused: gRPC marshals the response after the handler returns.
type reply struct {
	resp     rlsv3.RateLimitResponse
	one      statusSlot
	onePtr   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	headers  [4]*corev3.HeaderValue
	limit    corev3.HeaderValue // RateLimit
	retry    corev3.HeaderValue // Retry-After
	warning  corev3.HeaderValue // RateLimit-Warning
	text     [256]byte          // the values of limit, retry and warning
	textUsed int
}

// statusSlot is a descriptor status and its duration_until_reset.
type statusSlot struct {
	status   rlsv3.RateLimitResponse_DescriptorStatus
	duration durationpb.Duration
}

// newReply returns a reply with n statuses, each pointing to its duration.
func newReply(n int) *reply {
	r := &reply{}
	r.resp.OverallCode = rlsv3.RateLimitResponse_OK
	var slots []statusSlot
	if n == 1 {
		slots = unsafe.Slice(&r.one, 1)
		r.resp.Statuses = r.onePtr[:]
	} else {
		slots = make([]statusSlot, n)
		r.resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range slots {
		slots[i].status.DurationUntilReset = &slots[i].duration
		r.resp.Statuses[i] = &slots[i].status
	}
	r.resp.ResponseHeadersToAdd = r.headers[:0]
	return r
}

// textOf returns b as a string kept in r's text, or b's own copy when it does not fit. The bytes
// are written once and never changed, so the string is immutable as a string must be.
func (r *reply) textOf(b []byte) string {
	if r.textUsed+len(b) > len(r.text) {
		return string(b)
	}
	t := r.text[r.textUsed : r.textUsed+len(b)]
	copy(t, b)
	r.textUsed += len(b)
	return unsafe.String(&t[0], len(t))
}

// appendHeaders adds the response headers for c: RateLimit-Policy and RateLimit always,
// Retry-After when rejected, X-RateLimit-* when legacy.
func (r *reply) appendHeaders(c *headerChoice, legacy bool) {
	v := c.view
	reset := ceilSeconds(c.resetMs)
	rem := max(c.remaining, 0)
	var buf [96]byte
	b := append(buf[:0], v.quotedName...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, rem, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	r.limit = corev3.HeaderValue{Key: HeaderRateLimit, Value: r.textOf(b)}
	h := append(r.resp.ResponseHeadersToAdd, v.policy, &r.limit)
	if c.retryMs > 0 {
		r.retry = corev3.HeaderValue{Key: HeaderRetryAfter, Value: r.textOf(strconv.AppendInt(buf[:0], max(ceilSeconds(c.retryMs), 1), 10))}
		h = append(h, &r.retry)
	}
	if legacy {
		h = append(h, v.legacyLimit,
			&corev3.HeaderValue{Key: HeaderLegacyRemaining, Value: strconv.FormatInt(rem, 10)},
			&corev3.HeaderValue{Key: HeaderLegacyReset, Value: strconv.FormatInt(reset, 10)})
	}
	r.resp.ResponseHeadersToAdd = h
}

// appendWarning adds the soft stage's RateLimit-Warning for c (see overMeter and softNotice for
// its parameters).
func (r *reply) appendWarning(c *headerChoice) {
	v := c.view
	var buf [224]byte
	b := append(buf[:0], v.warnPrefix...)
	b = strconv.AppendInt(b, c.overPct, 10)
	b = append(b, v.warnEnforce...)
	b = append(b, `;msg="`...)
	b = strconv.AppendInt(b, c.overPct, 10)
	b = append(b, v.warnTail...)
	b = append(b, '"')
	r.warning = corev3.HeaderValue{Key: HeaderWarning, Value: r.textOf(b)}
	r.resp.ResponseHeadersToAdd = append(r.resp.ResponseHeadersToAdd, &r.warning)
}
