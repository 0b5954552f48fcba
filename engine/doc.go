// Package engine owns rlctl's rate-limit mathematics and token leasing, shared
// by the enforcer and the simulator.
//
// # Algorithms
//
// A Limit is Requests per Window milliseconds under one Algorithm:
// TokenBucket (the default; capacity Burst, refill Requests per Window),
// SlidingWindow (the sliding window counter) or FixedWindow (epoch-aligned
// windows with envoyproxy/ratelimit's over-limit rule). All arithmetic is on
// integers and time is integer milliseconds: a token is Window/g units and the
// bucket gains Requests/g units per millisecond, g = gcd(Requests, Window).
// Limit.Validate bounds every intermediate below 2^53, so the same arithmetic
// runs exactly in Redis's Lua, whose numbers are doubles.
//
// # Stores
//
// A Store decides a take atomically for all the limits of one key (a burst
// and a sustained limit, say): it grants between TakeRequest.Min (the
// request's own cost) and Want tokens from every limit, or nothing, and
// reports Remaining, RetryAfter and ResetAfter. Memory is the in-process
// reference; Redis runs the same arithmetic as one Lua script per operation
// on one hash per key, and TestRedisMatchesModel holds the two bit-identical.
// Keys come from Key or AppendKey, which escape descriptor values so that
// none can collide with another key or pick a Redis Cluster slot.
//
// # Leasing
//
// A LeaseManager spends tokens leased from a Store locally, without I/O,
// prefetches the next lease below a low watermark, sizes leases from observed
// traffic and rejects a key locally after the store said it is over the limit.
// It reads time only from an injected Clock and does asynchronous work only
// through an injected Dispatcher, and it never starts goroutines. A Decision
// carries what RLS needs per descriptor: Remaining, RetryAfter, ResetAfter
// (duration_until_reset) and Limiting (which limit's headers to report);
// see Decision for what a local hit reports. Sweep visits only the leases
// that are due (a heap keyed by expiry), not every lease.
//
// A key the store denied, or whose grant left less than a batch, is dry: once
// its balance is spent it is rejected locally until a batch can have refilled
// (what its limit refills in 100 ms), then one store call at a time asks for
// the next, and requests that find that call in flight are rejected locally.
// So a key far over its limit costs the store about ten calls a second per
// manager, whatever its traffic. A take the Store stopped waiting for (Late)
// stays in flight until it lands; its reply then counts as a prefetch's. A
// KeyCap bounds the leases managers hold; an eviction gives the lease's tokens
// back first.
//
// # Failure modes
//
// RulePlan.Decide applies a rule's failure mode when the store is unavailable:
// fail-closed denies; fail-open admits up to the rule's fallback bucket, else
// FallbackFactor times the key's recently admitted rate (sampled at store
// replies only, so an outage freezes it), else DefaultFallback, the rule's
// limits divided by its gateways. Never without bound.
//
// # Driving the lease manager in virtual time
//
// A simulator gives each virtual gateway a LeaseManager whose Clock is the
// simulation's virtual clock and whose Dispatcher, instead of starting a
// goroutine, queues the function as an event at now + the modelled store
// latency. Its loop advances the clock to the next request or event, runs due
// events first (a prefetch then takes from the shared Memory store at the
// instant it "reaches Redis" and credits the gateway), calls Take for the
// request, and calls Sweep now and then so that idle leases expire. See the
// LeaseManager example. The enforcer passes a wall clock, a Dispatcher that
// runs fn on a goroutine with a store-timeout context, and StoreClock so that
// Redis's TIME decides.
//
// # Single-goroutine use
//
// A simulator that runs everything on one goroutine (requests, the events
// its Dispatcher queued, Sweep) should say so, and pays for no locks or
// atomic read-modify-writes: create the shared store and the ideal engine
// with NewSingleGoroutineMemory(clock) instead of NewMemory(clock), and set
// LeaseConfig.SingleGoroutine on every LeaseManager. Decisions, store state
// and counters are bit for bit those of the concurrent forms
// (TestLeaseSingleGoroutineMatches, and TestRedisMatchesModel runs the
// single-goroutine Memory beside the concurrent one). A store key kept in a
// reused buffer goes to Memory.TakeBytes and LeaseManager.TakeBytes without
// allocating. Pass the same []Limit slice for a key every time: Memory caches
// each slice's validated exact scheme (checked by value, so a changed slice
// is never stale), and the divisions it saves cost more than the decision.
package engine
