// Package policyfixture builds parts of compiled policies for tests. What a test does not set
// gets the value the schema gives a policy that leaves it out, taken from the schema's own
// Default* constants: when a default changes, every fixture built here follows it, rather than
// keeping the old value while claiming to be a default.
//
// Tests that need a whole policy as users write it load CUE through schema.Load instead.
package policyfixture

import (
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// A LeaseOption changes one thing of a Lease from the schema's default.
type LeaseOption func(*policy.Lease)

// Lease returns the lease the schema gives a rule whose policy sets no lease fields, with opts
// applied in order.
func Lease(opts ...LeaseOption) policy.Lease {
	l := policy.Lease{
		Min:                 schema.DefaultLeaseMin,
		Max:                 schema.DefaultLeaseMax,
		LookaheadMs:         schema.DefaultLeaseLookaheadMs,
		LowWatermarkPercent: schema.DefaultLowWatermarkPercent,
		TTLMs:               schema.DefaultLeaseTTLMs,
	}
	for _, o := range opts {
		o(&l)
	}
	return l
}

// Bounds sets the smallest and largest lease, in tokens (lease.min and lease.max).
func Bounds(lo, hi int64) LeaseOption {
	return func(l *policy.Lease) { l.Min, l.Max = lo, hi }
}

// TTL sets how long unspent leased tokens are held, in milliseconds (lease.ttl).
func TTL(ms int64) LeaseOption {
	return func(l *policy.Lease) { l.TTLMs = ms }
}

// WatermarkPercent sets the low watermark as a percentage of the lease (lease.low_watermark:
// "P%").
func WatermarkPercent(p int64) LeaseOption {
	return func(l *policy.Lease) { l.LowWatermark, l.LowWatermarkPercent = 0, p }
}

// Watermark sets the low watermark in tokens (lease.low_watermark: N).
func Watermark(tokens int64) LeaseOption {
	return func(l *policy.Lease) { l.LowWatermark, l.LowWatermarkPercent = tokens, 0 }
}

// UnsetWatermark leaves both watermark fields 0, which no compiled policy does: the engine then
// applies its own default (engine.LeaseConfig's LowWaterPercent), not the schema's.
func UnsetWatermark() LeaseOption {
	return func(l *policy.Lease) { l.LowWatermark, l.LowWatermarkPercent = 0, 0 }
}
