package enforcer

import (
	"context"
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
