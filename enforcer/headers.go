package enforcer

import (
	"strconv"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

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
	// warning is the RateLimit-Warning of the soft stage.
	warning *corev3.HeaderValue
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
		warning: &corev3.HeaderValue{Key: HeaderWarning, Value: name + ";q=" + q + ";w=" + ws +
			`; over quota, admitted: this request will be rejected when the rule is enforced`},
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
// restrictive one, that is the one with the fewest remaining tokens, the later reset on ties.
type headerChoice struct {
	view      *limitView
	remaining int64
	resetMs   int64
	retryMs   int64 // > 0 when the descriptor is rejected
	warn      bool  // over the limit in the soft stage
}

// better reports whether c is more restrictive than o.
func (c *headerChoice) better(o *headerChoice) bool {
	if o.view == nil {
		return true
	}
	if (c.retryMs > 0) != (o.retryMs > 0) {
		return c.retryMs > 0
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
	text     [64]byte           // the values of limit and retry
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
