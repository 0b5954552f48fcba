package lint

import (
	"fmt"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of figures that keep a rule from working as written: a cost above
// what a bucket can ever hold (RL016) and a low watermark above the largest lease (RL017).

// checkCostCapacity reports a limit whose cost is above its capacity (RL016): a request needs more
// tokens than the bucket (or window) can ever hold, so every request is rejected. A sub-sharded
// rule's capacity is each shard's share, as the engine enforces it (engine.Shard).
func checkCostCapacity(_ *policy.Domain, r *policy.Rule, e *emitter) {
	for i, l := range r.Limits {
		el, err := engine.LimitOf(l)
		if err != nil {
			continue // RL004 or the model's own validation reports it
		}
		what := "requests per window"
		if el.Algorithm == engine.TokenBucket {
			what = "burst"
		}
		capacity := el.Capacity()
		if r.Sharded() {
			capacity = engine.Shard([]engine.Limit{el}, int64(r.SubShards.Count))[0].Capacity()
			what = fmt.Sprintf("%s / %d sub_shards", what, r.SubShards.Count)
		}
		if l.Cost > capacity {
			e.at(l.Pos, r, "%s: cost %d is above the capacity %d (%s), so every request is rejected",
				limitName(r, i), l.Cost, capacity, what)
		}
	}
}

// checkLowWatermark reports a low watermark, in tokens, above the largest lease (RL017): a lease
// never lifts the local balance above it, so every request prefetches another lease and leasing
// saves no store calls.
func checkLowWatermark(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if l := r.Lease; l.LowWatermark > l.Max {
		e.at(r.PosOf(policy.SettingLowWatermark), r, "lease low_watermark %d tokens is above lease max %d: the local balance is always below it, so every request prefetches a lease",
			l.LowWatermark, l.Max)
	}
}

// checkShardRounding reports a sub-sharded limit whose shards admit less together than the limit
// (RL028): each shard holds requests / count rounded down (engine.Shard), so 31 a second over 16
// shards admits 16. A loss of 1% or less is the price of sharding and not reported.
func checkShardRounding(_ *policy.Domain, r *policy.Rule, e *emitter) {
	n := engine.RuleShards(r)
	if n < 2 {
		return
	}
	for i, l := range r.Limits {
		if l.Requests < n {
			continue // refused by the model's own validation
		}
		total := l.Requests / n * n
		if lost := l.Requests - total; lost*100 > l.Requests {
			e.at(l.Pos, r, "%s: %d sub_shards of %d each admit %d a window together, not %d (%d%% less): make requests a multiple of %d, or shard fewer ways",
				limitName(r, i), n, l.Requests/n, total, l.Requests, lost*100/l.Requests, n)
			continue
		}
		// A burst set apart from requests is split the same way (engine.Shard).
		if b := l.Burst; b != l.Requests && b >= n {
			if lost := b - b/n*n; lost*100 > b {
				e.at(l.Pos, r, "%s: %d sub_shards of burst %d each hold %d together, not %d (%d%% less): make burst a multiple of %d, or shard fewer ways",
					limitName(r, i), n, b/n, b/n*n, b, lost*100/b, n)
			}
		}
	}
}
