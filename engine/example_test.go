package engine_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/rlctl/rlctl/engine"
)

// sim is a minimal discrete-event simulation: Now is virtual time in ms, and
// Go schedules store work to run latency ms later.
type sim struct {
	now, latency int64
	queue        []simEvent
}

type simEvent struct {
	at int64
	fn func(context.Context)
}

func (s *sim) Now() int64 { return s.now }

func (s *sim) Go(fn func(context.Context)) {
	s.queue = append(s.queue, simEvent{at: s.now + s.latency, fn: fn})
}

// advance runs the events due by t in time order, then moves the clock to t.
func (s *sim) advance(t int64) {
	for {
		sort.SliceStable(s.queue, func(i, j int) bool { return s.queue[i].at < s.queue[j].at })
		if len(s.queue) == 0 || s.queue[0].at > t {
			break
		}
		e := s.queue[0]
		s.queue = s.queue[1:]
		s.now = max(s.now, e.at)
		e.fn(context.Background())
	}
	s.now = max(s.now, t)
}

// Two gateways lease from one bucket of 50 requests per second (burst 50)
// while clients offer 300 requests per second for two seconds; the store
// answers after 3 ms of virtual time. The bucket can release at most
// 50 + 2 × 50 tokens in that time. Once it is dry, each gateway asks the store
// again only when a batch can have refilled, so most denials are local.
func ExampleLeaseManager() {
	ctx := context.Background()
	clock := &sim{now: 1_000_000, latency: 3}
	store := engine.NewMemory(nil) // every request carries its virtual time
	limits := []engine.Limit{{Algorithm: engine.TokenBucket, Requests: 50, Window: 1000}}
	key := engine.Key("edge", "tenant", "acme")

	var gateways []*engine.LeaseManager
	for range 2 {
		m, err := engine.NewLeaseManager(engine.LeaseConfig{
			Store: store, Clock: clock, Dispatcher: clock,
			MinLease: 5, MaxLease: 50, TTL: 1000,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		gateways = append(gateways, m)
	}

	admitted := 0
	start := clock.now
	for i := range 600 {
		clock.advance(start + int64(i)*10/3) // 300 per second
		if i%30 == 0 {
			for _, g := range gateways {
				_ = g.Sweep(ctx) // expire idle leases in virtual time
			}
		}
		d, err := gateways[i%2].Take(ctx, key, limits, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if d.OK {
			admitted++
		}
	}
	var fetches, local int64
	for _, g := range gateways {
		fetches += g.Stats().Fetches
		local += g.Stats().ShortCircuits
	}
	fmt.Println("admitted:", admitted, "of 600; the bucket releases at most", 50+2*50)
	fmt.Println("store calls:", fetches, "local rejections:", local)
	// Output:
	// admitted: 148 of 600; the bucket releases at most 150
	// store calls: 44 local rejections: 434
}

func ExampleKey() {
	fmt.Println(engine.Key("edge", "tenant_id", "shop{1}:eu"))
	// Output: rl:edge:tenant_id:shop%7B1%7D%3Aeu
}
