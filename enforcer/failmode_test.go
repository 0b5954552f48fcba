package enforcer

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/rlctl/rlctl/policy"
)

// TestFailureModeHeader sends the same two descriptors (a fail-closed rule's and a fail-open
// rule's, 3 a minute each) four times as the two rate-limit filters that render --target envoy
// writes would: once a call with each failure mode. Each rule is counted once per round, by the
// call of its own mode; the other call answers OK without counting, so the 4th round is over the
// limit for each rule on its own call only. A call without the key, or with an unknown value,
// answers every descriptor.
func TestFailureModeHeader(t *testing.T) {
	in := spawn(t, testModel(), nil)
	closedDesc, openDesc := []string{"stage=enforce", "user=u1"}, []string{"stage=open", "user=u1"}
	askAs := func(mode string) [2]string {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(context.Background(), policy.FailureModeHeader, mode)
		resp, err := in.client.ShouldRateLimit(ctx, request("edge", closedDesc, openDesc))
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return [2]string{resp.Statuses[0].Code.String(), resp.Statuses[1].Code.String()}
	}
	for round, want := range []struct{ closed, open [2]string }{
		{[2]string{"OK", "OK"}, [2]string{"OK", "OK"}},
		{[2]string{"OK", "OK"}, [2]string{"OK", "OK"}},
		{[2]string{"OK", "OK"}, [2]string{"OK", "OK"}},
		{[2]string{"OVER_LIMIT", "OK"}, [2]string{"OK", "OVER_LIMIT"}},
	} {
		if got := askAs("closed"); got != want.closed {
			t.Errorf("round %d, closed call: got %v, want %v", round, got, want.closed)
		}
		if got := askAs("open"); got != want.open {
			t.Errorf("round %d, open call: got %v, want %v", round, got, want.open)
		}
	}
	for _, name := range []string{"enforce", "open"} {
		metric := `rate_limit_requests_total{decision="ok",domain="edge",rule="` + name + `"}`
		if got, want := in.metric(t, metric), 3.0; got != want {
			t.Errorf("%s: got %v, want %v", metric, got, want)
		}
	}
	// An unknown mode answers every descriptor: both are over their limit now.
	if got, want := askAs("sometimes"), [2]string{"OVER_LIMIT", "OVER_LIMIT"}; got != want {
		t.Errorf("unknown mode: got %v, want %v", got, want)
	}
}

// TestFailedClosedCountedApart: with the store unreachable, a fail-closed rule's denials are
// counted as decision="failed_closed", not as over its limit, at every stage: an enforce rule
// still answers OVER_LIMIT, a shadow rule admits without a RateLimitShadowBlock event, and a
// soft rule warns. They were counted as over_limit, shadow_over and soft_over, so an outage read
// as traffic over the limits (and fired RateLimitRuleWouldDeny on shadow rules).
func TestFailedClosedCountedApart(t *testing.T) {
	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules,
		testRule("shadow-closed", 3, policy.Stage{Name: policy.StageShadow}, policy.FailClosed),
		testRule("soft-closed", 3, policy.Stage{Name: policy.StageSoft}, policy.FailClosed))
	in := spawn(t, m, func(c *Config) { c.Store, c.RedisURL = "redis", "redis://127.0.0.1:1/0" })
	resp := in.ask(t, "edge", []string{"stage=enforce", "user=u"}, []string{"stage=shadow-closed", "user=u"},
		[]string{"stage=soft-closed", "user=u"})
	var codes []string
	for _, st := range resp.Statuses {
		codes = append(codes, st.Code.String())
	}
	if want := []string{"OVER_LIMIT", "OK", "OK"}; !slices.Equal(codes, want) {
		t.Errorf("codes %v, want %v", codes, want)
	}
	if header(resp, HeaderWarning) == "" {
		t.Errorf("no %s header for the soft rule", HeaderWarning)
	}
	for _, rule := range []string{"enforce", "shadow-closed", "soft-closed"} {
		for decision, want := range map[string]float64{"failed_closed": 1, "over_limit": 0, "shadow_over": 0, "soft_over": 0} {
			metric := `rate_limit_requests_total{decision="` + decision + `",domain="edge",rule="` + rule + `"}`
			if got := in.metric(t, metric); got != want {
				t.Errorf("%s = %v, want %v", metric, got, want)
			}
		}
	}
	if strings.Contains(in.logs.String(), "RateLimitShadowBlock") {
		t.Error("a shadow rule failing closed on an unavailable store logged a RateLimitShadowBlock event")
	}
}
