package enforcer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// softWarning is the warning of the test model's soft rules, which have no since.
var softWarning = regexp.MustCompile(`^"(soft|canary-none)";q=3;w=60;over=(34|67);msg="(34|67)% over quota, admitted; no enforcement date is set"$`)

// TestStages sends 5 requests to a 3-per-minute rule in each stage.
func TestStages(t *testing.T) {
	in := spawn(t, testModel(), nil)
	for _, tc := range []struct {
		stage   string
		want    []rlsv3.RateLimitResponse_Code
		warning bool // the 4th and 5th answers carry RateLimit-Warning
		metric  string
	}{
		{"enforce", []rlsv3.RateLimitResponse_Code{ok, ok, ok, over, over}, false, `rate_limit_requests_total{decision="over_limit",domain="edge",rule="enforce"}`},
		{"shadow", []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok}, false, `rate_limit_shadow_block_total{domain="edge",rule="shadow"}`},
		{"soft", []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok}, true, `rate_limit_requests_total{decision="soft_over",domain="edge",rule="soft"}`},
		{"canary-all", []rlsv3.RateLimitResponse_Code{ok, ok, ok, over, over}, false, `rate_limit_requests_total{decision="over_limit",domain="edge",rule="canary-all"}`},
		{"canary-none", []rlsv3.RateLimitResponse_Code{ok, ok, ok, ok, ok}, true, `rate_limit_requests_total{decision="soft_over",domain="edge",rule="canary-none"}`},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			for i, want := range tc.want {
				resp := in.ask(t, "edge", []string{"stage=" + tc.stage, "user=u1"})
				if got := resp.OverallCode; got != want {
					t.Errorf("request %d: overall code: got %v, want %v", i, got, want)
				}
				if got := resp.Statuses[0].Code; got != want {
					t.Errorf("request %d: status code: got %v, want %v", i, got, want)
				}
				if got, want := header(resp, HeaderWarning) != "", tc.warning && i >= 3; got != want {
					t.Errorf("request %d: RateLimit-Warning present: got %v, want %v", i, got, want)
				}
				// 1 and then 2 tokens over a quota of 3 (1 again if a minute began in between).
				if w := header(resp, HeaderWarning); w != "" && !softWarning.MatchString(w) {
					t.Errorf("request %d: RateLimit-Warning: got %s, want it to match %s", i, w, softWarning)
				}
			}
			if got, want := in.metric(t, tc.metric), 2.0; got != want {
				t.Errorf("%s: got %v, want %v", tc.metric, got, want)
			}
		})
	}
	if !strings.Contains(in.logs.String(), `"msg":"RateLimitShadowBlock"`) {
		t.Errorf("logs: no RateLimitShadowBlock event in %s", in.logs.String())
	}
}

func TestStatusesAndHeaders(t *testing.T) {
	in := spawn(t, testModel(), func(c *Config) { c.LegacyHeaders = true })
	// Three descriptors: a limited one, an unmatched one, and a roomy one.
	var resp *rlsv3.RateLimitResponse
	for range 4 {
		resp = in.ask(t, "edge", []string{"stage=enforce", "user=u2"}, []string{"nothing=here"}, []string{"stage=big", "user=u2"})
	}
	if got, want := resp.OverallCode, over; got != want {
		t.Fatalf("overall: got %v, want %v", got, want)
	}
	if got, want := len(resp.Statuses), 3; got != want {
		t.Fatalf("statuses: got %d, want %d", got, want)
	}
	s0, s1, s2 := resp.Statuses[0], resp.Statuses[1], resp.Statuses[2]
	if s0.Code != over || s0.CurrentLimit.GetRequestsPerUnit() != 3 || s0.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || s0.LimitRemaining != 0 {
		t.Errorf("status 0: got %v, want OVER_LIMIT 3/MINUTE remaining 0", s0)
	}
	// duration_until_reset is the time until the bucket is full again: the three tokens
	// spent refill in 60 s, less the milliseconds since the first take. Retry-After (below) is
	// the time until one token is back, 20 s.
	if d := s0.DurationUntilReset.AsDuration(); d <= 50e9 || d > 60e9 {
		t.Errorf("status 0 duration_until_reset: got %v, want (50s, 60s]", d)
	}
	if s1.Code != ok || s1.CurrentLimit != nil {
		t.Errorf("unmatched status: got %v, want OK with no limit", s1)
	}
	// Remaining is the lease manager's view (store remaining plus the local balance), so it
	// may lag the 4 spent tokens by a lease; and this bucket refills about 16 tokens a
	// millisecond, so after a few milliseconds it may be full again. It never exceeds capacity.
	if s2.Code != ok || s2.CurrentLimit.GetRequestsPerUnit() != 1_000_000 || s2.LimitRemaining < 1_000_000-10 || s2.LimitRemaining > 1_000_000 {
		t.Errorf("status 2: got %v, want OK 1000000/MINUTE remaining in [999990, 1000000]", s2)
	}
	for name, want := range map[string]string{
		HeaderPolicy:          `"enforce";q=3;w=60`,
		HeaderRateLimit:       `"enforce";r=0;t=60`,
		HeaderRetryAfter:      "20",
		HeaderLegacyLimit:     "3, 3;w=60",
		HeaderLegacyRemaining: "0",
		HeaderLegacyReset:     "60",
	} {
		if got := header(resp, name); !strings.HasPrefix(got, want) {
			t.Errorf("header %s: got %q, want prefix %q", name, got, want)
		}
	}
	// An OK answer describes the most restrictive descriptor too: one of the soft rule's 3
	// tokens a minute is spent, and it is back in 20 s.
	resp = in.ask(t, "edge", []string{"stage=big", "user=u3"}, []string{"stage=soft", "user=u3"})
	if got, want := header(resp, HeaderRateLimit), `"soft";r=2;t=20`; got != want {
		t.Errorf("RateLimit: got %q, want %q", got, want)
	}
	// A shadow rule's are not the client's business: exhausted, it described the call (r=0)
	// and hid the enforced rule it was beside.
	for range 4 {
		resp = in.ask(t, "edge", []string{"stage=big", "user=u4"}, []string{"stage=shadow", "user=u4"})
	}
	if got := header(resp, HeaderPolicy); !strings.HasPrefix(got, `"big";`) {
		t.Errorf("RateLimit-Policy beside an exhausted shadow rule: got %q, want the enforced rule big's", got)
	}
	if got := header(resp, HeaderRetryAfter); got != "" {
		t.Errorf("Retry-After on OK: got %q, want none", got)
	}
}

func TestUnknownDomain(t *testing.T) {
	in := spawn(t, testModel(), nil)
	resp := in.ask(t, "nope", []string{"stage=enforce", "user=x"})
	if resp.OverallCode != ok || len(resp.Statuses) != 1 || resp.Statuses[0].Code != ok || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("got %v, want OK with one status and no limit", resp)
	}
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers: got %v, want none", resp.ResponseHeadersToAdd)
	}
	// Calls in progress: none once the call has returned.
	if got, want := in.metric(t, "rate_limit_inflight_requests"), 0.0; got != want {
		t.Errorf("rate_limit_inflight_requests: got %v, want %v", got, want)
	}
}

func TestHitsAddendAndOverride(t *testing.T) {
	in := spawn(t, testModel(), nil)
	req := request("edge", []string{"stage=enforce", "user=h1"})
	req.HitsAddend = 2
	steps := []struct {
		reqHits  uint32
		descHits *wrapperspb.UInt64Value
		want     rlsv3.RateLimitResponse_Code
		rem      uint32
	}{
		{2, nil, ok, 1},                    // request-level addend
		{2, wrapperspb.UInt64(1), ok, 0},   // descriptor addend overrides it
		{0, nil, over, 0},                  // default cost 1, none left
		{0, wrapperspb.UInt64(0), over, 0}, // 0 means the default
	}
	for i, s := range steps {
		req.HitsAddend = s.reqHits
		req.Descriptors[0].HitsAddend = s.descHits
		resp, err := in.client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Statuses[0].Code; got != s.want {
			t.Errorf("step %d: code: got %v, want %v", i, got, s.want)
		}
		if got := resp.Statuses[0].LimitRemaining; got != s.rem {
			t.Errorf("step %d: remaining: got %d, want %d", i, got, s.rem)
		}
	}
	// A limit override gives the descriptor its own limit and key.
	req = request("edge", []string{"stage=enforce", "user=h1"})
	req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_SECOND}
	resp, err := in.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0]; got.Code != ok || got.CurrentLimit.GetRequestsPerUnit() != 10 || got.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || got.LimitRemaining != 9 {
		t.Errorf("override: got %v, want OK 10/SECOND remaining 9", got)
	}
}

// TestRemainingOnLeaseHits: limit_remaining is what the key can still grant, the store's
// remaining at its last reply plus the local lease, on the request that leased tokens and on the
// hits that spend them locally after it (which reported the lease alone: 999, then 18, 17).
func TestRemainingOnLeaseHits(t *testing.T) {
	r := testRule("leased", 1000, policy.Stage{Name: policy.StageEnforce}, policy.FailClosed)
	r.Lease = policyfixture.Lease(policyfixture.Bounds(20, 20), policyfixture.TTL(10_000), policyfixture.UnsetWatermark())
	in := spawn(t, &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{r}}}}, nil)
	for i := range 5 {
		st := in.ask(t, "edge", []string{"stage=leased", "user=u"}).Statuses[0]
		if want := uint32(999 - i); st.LimitRemaining != want {
			t.Errorf("request %d: limit_remaining %d, want %d", i+1, st.LimitRemaining, want)
		}
	}
}

// TestOverrideOfShardedRule: a limit override on a sub-sharded rule is shared among the shards
// as the rule's own limit is, so that the requests of many addresses (spread over the shards)
// are admitted up to the override, not up to the override times the shard count.
func TestOverrideOfShardedRule(t *testing.T) {
	r := testRule("sharded", 400, policy.Stage{Name: policy.StageEnforce}, policy.FailClosed)
	r.SubShards = &policy.SubShards{Count: 4, Attribute: "ip"}
	in := spawn(t, &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{r}}}}, nil)
	admitted := 0
	for i := range 200 {
		req := request("edge", []string{"stage=sharded", "user=u", fmt.Sprintf("ip=10.0.%d.%d", i/250, i%250)})
		req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 40, Unit: typev3.RateLimitUnit_HOUR}
		resp, err := in.client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Statuses[0].Code == ok {
			admitted++
		}
		if i == 0 && resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 40 {
			t.Errorf("current limit: got %v, want the override, 40 an hour", resp.Statuses[0].CurrentLimit)
		}
	}
	if admitted > 40 || admitted < 30 {
		t.Errorf("override 40 an hour over 4 sub-shards: admitted %d of 200, want 40 at most (10 a shard)", admitted)
	}
	// Fewer than one a shard: each shard would admit 1, 4 in all for an override of 2.
	req := request("edge", []string{"stage=sharded", "user=u", "ip=10.9.0.1"})
	req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	_, err := in.client.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit override of 2 is fewer than rule sharded's 4 sub-shards") {
		t.Errorf("override 2 an hour over 4 sub-shards: got %v, want InvalidArgument", err)
	}
}

// TestOverrideForms: a rule gives the same override the same limits, the one slice, so that
// the lease manager does not take each request's fresh copy for a change of limits (its check
// is by the slice's address, and a change costs a locked visit); and it keeps the forms of at
// most maxOverrideForms overrides, whatever values the requests carry.
func TestOverrideForms(t *testing.T) {
	in := spawn(t, testModel(), nil)
	rs := in.cfg.Load().domains["edge"].rules[0]
	o := func(n uint32) *commonv3.RateLimitDescriptor_RateLimitOverride {
		return &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_MINUTE}
	}
	a, va := rs.override(o(7))
	b, vb := rs.override(o(7))
	if &a[0] != &b[0] || va[0] != vb[0] {
		t.Error("the same override twice: two forms, want one")
	}
	if a[0].Requests != 7 || a[0].Window != 60_000 || va[0].requests != 7 {
		t.Errorf("override 7 a minute: got %+v, view of %d", a[0], va[0].requests)
	}
	for n := range uint32(2 * maxOverrideForms) {
		if l, _ := rs.override(o(1000 + n)); l[0].Requests != int64(1000+n) {
			t.Fatalf("override %d: got %+v", 1000+n, l[0])
		}
	}
	if got := rs.nOverrides.Load(); got != maxOverrideForms {
		t.Errorf("kept %d forms, want %d", got, maxOverrideForms)
	}
}

// TestLongValueDecided: a descriptor value of any length (a header the client chose) is
// decided with the call's other descriptors, its key holding a digest of it past
// engine.MaxKeyValueLen. The call was refused whole (InvalidArgument), and Envoy's fail-open
// filter admitted the request unchecked: a 1.1 KB x-api-key skipped every rule of its call.
func TestLongValueDecided(t *testing.T) {
	in := spawn(t, testModel(), nil)
	long := strings.Repeat("a", 2*engine.MaxKeyValueLen)
	other := strings.Repeat("a", 2*engine.MaxKeyValueLen-1) + "b" // the same length, another key
	for i := range 4 {
		resp := in.ask(t, "edge", []string{"stage=enforce", "user=" + long}, []string{"stage=open", "user=u" + strconv.Itoa(i)})
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT // 3 a minute
		}
		if got := resp.Statuses[0].Code; got != want {
			t.Errorf("request %d: long value: got %v, want %v", i, got, want)
		}
		if got := resp.Statuses[1].Code; got != rlsv3.RateLimitResponse_OK {
			t.Errorf("request %d: the call's other descriptor: got %v, want OK", i, got)
		}
	}
	if got := in.ask(t, "edge", []string{"stage=enforce", "user=" + other}).Statuses[0].Code; got != rlsv3.RateLimitResponse_OK {
		t.Errorf("another long value: got %v, want OK (a key of its own)", got)
	}
}

func TestInvalidRequests(t *testing.T) {
	in := spawn(t, testModel(), nil)
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", request("", []string{"a=b"}), "domain is empty"},
		{"no descriptors", request("edge"), "no descriptors"},
		{"empty entries", request("edge", []string{}), "descriptor 0 has no entries"},
		{"empty key", request("edge", []string{"=v"}), "empty key"},
		{"too many entries", request("edge", strings.Split(strings.Repeat("a=b,", MaxEntries+1)[:4*(MaxEntries+1)-1], ",")), "entries, over the cap"},
		{"bad override", func() *rlsv3.RateLimitRequest {
			r := request("edge", []string{"a=b"})
			r.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
			return r
		}(), "limit override has unit"},
		{"override window overflows", func() *rlsv3.RateLimitRequest {
			r := request("edge", []string{"a=b"})
			r.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1,
				Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(584_942_418)}
			return r
		}(), "limit override of 584942418 × YEAR is too long a window"},
		// Beyond the engine's exact range for the rule it selects: it was denied, with no word.
		{"override out of range", func() *rlsv3.RateLimitRequest {
			r := request("edge", []string{"stage=enforce", "user=o"})
			r.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1_000_003,
				Unit: typev3.RateLimitUnit_YEAR}
			return r
		}(), "descriptor 0: limit override of 1000003 per 31536000000ms for rule enforce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := in.client.ShouldRateLimit(context.Background(), tc.req)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code: got %v (%v), want InvalidArgument", got, err)
			}
			if !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("message: got %q, want it to contain %q", status.Convert(err).Message(), tc.want)
			}
		})
	}
}

// TestTightestLimit: a rule with two limits reports the one with the fewest tokens left, in its
// status and its headers.
func TestTightestLimit(t *testing.T) {
	two := testRule("two", 10, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen)
	two.Limits = []policy.Limit{
		{Requests: 10, WindowMs: 1000, Burst: 10, Algorithm: policy.TokenBucket, Cost: 1},
		{Requests: 3, WindowMs: 60_000, Burst: 3, Algorithm: policy.TokenBucket, Cost: 1},
	}
	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules, two)
	in := spawn(t, m, nil)
	// After one request the second holds 9 tokens and the minute 2, back to 3 in 20 s.
	resp := in.ask(t, "edge", []string{"stage=two", "user=t1"})
	st := resp.Statuses[0]
	if st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 2 {
		t.Errorf("status: got %v, want OK 3/MINUTE remaining 2", st)
	}
	if d := st.DurationUntilReset.AsDuration(); d <= 19e9 || d > 20e9 {
		t.Errorf("duration_until_reset: got %v, want (19s, 20s]", d)
	}
	for name, want := range map[string]string{HeaderPolicy: `"two";q=3;w=60`, HeaderRateLimit: `"two";r=2;t=20`} {
		if got := header(resp, name); got != want {
			t.Errorf("header %s: got %q, want %q", name, got, want)
		}
	}
}

// TestMetricsStartAtZero checks that the documented series with known label values are on
// /metrics before their first event, so that rate() and alerts see them from the start.
func TestMetricsStartAtZero(t *testing.T) {
	in := spawn(t, testModel(), nil)
	for _, series := range []string{
		`rate_limit_invalid_requests_total{reason="empty_domain"}`,
		`rate_limit_invalid_requests_total{reason="too_large"}`,
		`rate_limit_invalid_requests_total{reason="bad_override"}`,
		`rate_limit_breaker_transitions_total{to="open"}`,
		`rate_limit_config_reloads_total{result="error"}`,
		`rate_limit_store_calls_total{op="take",result="timeout"}`,
		`rate_limit_bypassed_total{domain="edge",reason="redis_circuit_open",rule="open"}`,
		`rate_limit_journal_dropped_total`,
		`rate_limit_breaker_state`,
	} {
		if got := in.metric(t, series); got != 0 {
			t.Errorf("%s: got %v, want 0 (-1 is missing)", series, got)
		}
	}
}

// TestLogKey: a shadow block's log line names its key without the credentials in it: an
// api_key identity, or the value of a descriptor key named like a credential, is a digest
// (the same value, the same digest). The line held the raw API key.
func TestLogKey(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"rl:edge:dev:plan:developer_pro:client:api_key%3Ask_live_4eC39HqLyjWDarjtT1zdp7dc",
			"rl:edge:dev:plan:developer_pro:client:api_key%3A#" + digestHex("sk_live_4eC39HqLyjWDarjtT1zdp7dc")},
		{"rl:edge:r:x-api-key:k-123:tenant:acme", "rl:edge:r:x-api-key:#" + digestHex("k-123") + ":tenant:acme"},
		{"rl:edge:r:session_token:abc:shard:3", "rl:edge:r:session_token:#" + digestHex("abc") + ":shard:3"},
		{"rl:edge:r:client:subnet%3A203.0.113.0%2F24", "rl:edge:r:client:subnet%3A203.0.113.0%2F24"},
	} {
		if got := logKey([]byte(tc.key)); got != tc.want {
			t.Errorf("logKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func digestHex(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:6])
}
