package policyfixture

import (
	"testing"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// TestLeaseIsSchemaDefault: Lease() is what schema.Load compiles for a rule that sets no lease.
func TestLeaseIsSchemaDefault(t *testing.T) {
	m, err := schema.Load("testdata/default")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Domains[0].Rules[0].Lease, Lease(); got != want {
		t.Errorf("got %+v, want the loaded default %+v", got, want)
	}
}

func TestLeaseOptions(t *testing.T) {
	d := Lease()
	tests := []struct {
		name string
		got  policy.Lease
		want policy.Lease
	}{
		{"bounds", Lease(Bounds(1, 5)), policy.Lease{Min: 1, Max: 5, LookaheadMs: d.LookaheadMs, LowWatermarkPercent: d.LowWatermarkPercent, TTLMs: d.TTLMs}},
		{"ttl", Lease(TTL(700)), policy.Lease{Min: d.Min, Max: d.Max, LookaheadMs: d.LookaheadMs, LowWatermarkPercent: d.LowWatermarkPercent, TTLMs: 700}},
		{"percent", Lease(WatermarkPercent(25)), policy.Lease{Min: d.Min, Max: d.Max, LookaheadMs: d.LookaheadMs, LowWatermarkPercent: 25, TTLMs: d.TTLMs}},
		{"tokens", Lease(Watermark(50)), policy.Lease{Min: d.Min, Max: d.Max, LookaheadMs: d.LookaheadMs, LowWatermark: 50, TTLMs: d.TTLMs}},
		{"unset", Lease(Watermark(50), UnsetWatermark()), policy.Lease{Min: d.Min, Max: d.Max, LookaheadMs: d.LookaheadMs, TTLMs: d.TTLMs}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, tt.got, tt.want)
		}
	}
}
