package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A Dispatcher runs store calls off the request path: lease prefetches and
// returns of tokens a lease cannot hold. The enforcer runs fn on a goroutine
// with a context bounded by its store timeout; a simulator queues fn as an
// event at now + modelled latency on its virtual clock and runs it when the
// simulation reaches that instant. Go may also run fn before returning
// (synchronously); fn only calls the Store and then updates the lease.
type Dispatcher interface {
	Go(fn func(ctx context.Context))
}

// DispatchFunc adapts a function to a Dispatcher.
type DispatchFunc func(fn func(ctx context.Context))

// Go calls f(fn).
func (f DispatchFunc) Go(fn func(ctx context.Context)) { f(fn) }

// LeaseConfig configures a LeaseManager. Zero values take the defaults.
type LeaseConfig struct {
	// Store holds the shared buckets. Required.
	Store Store
	// Clock is the local clock. Required. The manager reads it only off
	// the hit path.
	Clock Clock
	// Dispatcher runs prefetches and returns asynchronously. nil runs them
	// inline, synchronously, which suits deterministic tests.
	Dispatcher Dispatcher
	// MinLease and MaxLease bound the lease size B (defaults 5 and 500).
	// Local balances never exceed MaxLease, so N instances strand at most
	// N × MaxLease tokens.
	MinLease, MaxLease int64
	// Lookahead is how many ms of observed traffic a lease should cover
	// (default 250): B = clamp(MinLease, observed rate × Lookahead,
	// MaxLease), smoothed with the same time constant.
	Lookahead int64
	// LowWaterPercent of B is the balance below which a prefetch starts
	// (default 25).
	LowWaterPercent int64
	// TTL is how long leased tokens stay local after the last fetch before
	// Sweep returns them to the store, in ms (default 10000).
	TTL int64
	// StoreClock makes store calls use the store's clock (Redis TIME, Now 0)
	// instead of Clock. Production sets it; simulations leave it off.
	StoreClock bool
}

// ErrClosed is returned by a LeaseManager after Close.
var ErrClosed = errors.New("lease manager closed")

// A LeaseManager admits requests against keys whose tokens live in a Store,
// leasing them in batches: a request covered by the key's local balance is
// decided without I/O, in a few atomic operations. Below a low watermark
// the manager prefetches the next lease through the Dispatcher, one at a time
// per key; a request that finds the balance short waits for one synchronous
// take of its own cost (or more) from the store, bounded by its context.
// After the store denies a key, requests costing as much are rejected
// locally until the retry-after instant. Sweep and Close give unspent tokens
// back. A LeaseManager never reads the wall clock and starts no goroutines:
// time comes from the Clock and asynchronous work goes to the Dispatcher, so
// a simulator runs the same code in virtual time. It is safe for concurrent
// use.
type LeaseManager struct {
	cfg    LeaseConfig
	leases sync.Map // key string → *lease
	closed atomic.Bool

	fetches, shortCircuits, returned, storeErrors atomic.Int64
}

// lease is one key's local state.
type lease struct {
	key      string
	balance  atomic.Int64 // tokens spendable without I/O
	lowWater atomic.Int64 // prefetch below this balance
	inflight atomic.Bool  // a prefetch is on its way

	mu       sync.Mutex // guards the fields below
	limits   []Limit
	capacity int64 // a cost above it can never be granted
	size     int64 // B
	credited int64 // tokens ever added to balance
	drained  int64 // tokens ever removed from balance by returns
	spent    int64 // tokens spent directly by synchronous takes
	seenUsed int64 // used() at lastSeen
	lastSeen int64 // local ms of the last observation
	takenAt  int64 // store time of the last grant
	expires  int64 // local ms: Sweep returns the balance from then on
	blocked  int64 // local ms: requests costing blockCost or more are denied before
	blockFor int64
	pending  int  // synchronous takes in flight
	dead     bool // removed by Sweep; look the key up again
}

// Decision is the outcome of LeaseManager.Take.
type Decision struct {
	// OK reports whether the request is admitted.
	OK bool
	// Local reports that no store call was made: a hit on the local
	// balance, or a short-circuited denial.
	Local bool
	// Remaining is the local balance after a hit, or what the store
	// reported the key still holds.
	Remaining int64
	// RetryAfter is, for a denial, the ms until the request could succeed,
	// or Never.
	RetryAfter int64
}

// LeaseStats counts a LeaseManager's store traffic.
type LeaseStats struct {
	// Fetches are store takes, synchronous and prefetches.
	Fetches int64
	// ShortCircuits are requests denied locally after an OVER_LIMIT.
	ShortCircuits int64
	// Returned is the number of tokens given back to the store.
	Returned int64
	// StoreErrors are failed store calls: takes and returns.
	StoreErrors int64
}

// NewLeaseManager returns a LeaseManager for cfg.
func NewLeaseManager(cfg LeaseConfig) (*LeaseManager, error) {
	if cfg.Store == nil || cfg.Clock == nil {
		return nil, errors.New("lease manager: store and clock are required")
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MinLease, 5)
	def(&cfg.MaxLease, 500)
	def(&cfg.Lookahead, 250)
	def(&cfg.LowWaterPercent, 25)
	def(&cfg.TTL, 10_000)
	if cfg.MinLease < 1 || cfg.MaxLease < cfg.MinLease || cfg.Lookahead < 1 || cfg.LowWaterPercent < 0 || cfg.TTL < 1 {
		return nil, fmt.Errorf("lease manager: bad config: min %d max %d lookahead %d low water %d%% ttl %d",
			cfg.MinLease, cfg.MaxLease, cfg.Lookahead, cfg.LowWaterPercent, cfg.TTL)
	}
	if cfg.Dispatcher == nil {
		cfg.Dispatcher = DispatchFunc(func(fn func(context.Context)) { fn(context.Background()) })
	}
	return &LeaseManager{cfg: cfg}, nil
}

// Take decides a request of cost tokens on key, whose limits are limits (the
// same for every call with that key). It returns an error for an invalid cost,
// after Close, and when the store fails; the caller then applies its
// fail-open or fail-closed rule.
func (m *LeaseManager) Take(ctx context.Context, key string, limits []Limit, cost int64) (Decision, error) {
	return m.take(ctx, m.lookup(key, limits), limits, cost)
}

// TakeBytes is Take for a key built with AppendKey into a reused buffer: it
// copies the key only the first time it sees it, so the request path stays
// free of allocations. key may be reused once TakeBytes returns.
func (m *LeaseManager) TakeBytes(ctx context.Context, key []byte, limits []Limit, cost int64) (Decision, error) {
	// The unsafe view is only looked up, never stored.
	if v, ok := m.leases.Load(unsafe.String(unsafe.SliceData(key), len(key))); ok {
		return m.take(ctx, v.(*lease), limits, cost)
	}
	return m.take(ctx, m.lookup(string(key), limits), limits, cost)
}

func (m *LeaseManager) take(ctx context.Context, l *lease, limits []Limit, cost int64) (Decision, error) {
	for {
		b := l.balance.Load()
		if b < cost || cost < 1 {
			break
		}
		if l.balance.CompareAndSwap(b, b-cost) {
			if b-cost < l.lowWater.Load() && !l.inflight.Load() {
				m.prefetch(l)
			}
			return Decision{OK: true, Local: true, Remaining: b - cost}, nil
		}
	}
	return m.slow(ctx, l, limits, cost)
}

func (m *LeaseManager) lookup(key string, limits []Limit) *lease {
	if v, ok := m.leases.Load(key); ok {
		return v.(*lease)
	}
	l := &lease{key: key, size: m.cfg.MinLease}
	l.setLimits(limits)
	l.lowWater.Store(m.lowWater(l.size))
	v, _ := m.leases.LoadOrStore(key, l)
	return v.(*lease)
}

// setLimits records the key's limits (a reload may change them) and the
// largest cost they can ever grant. The caller holds l.mu or owns l.
func (l *lease) setLimits(limits []Limit) {
	if len(limits) == len(l.limits) && (len(limits) == 0 || &limits[0] == &l.limits[0]) {
		return
	}
	l.limits, l.capacity = limits, MaxExact
	for _, lim := range limits {
		l.capacity = min(l.capacity, lim.Capacity())
	}
}

func (m *LeaseManager) lowWater(size int64) int64 {
	return max(1, size*m.cfg.LowWaterPercent/100)
}

// slow decides a request the local balance does not cover.
func (m *LeaseManager) slow(ctx context.Context, l *lease, limits []Limit, cost int64) (Decision, error) {
	if cost < 1 {
		return Decision{}, fmt.Errorf("%w: key %q: cost %d", ErrBadRequest, l.key, cost)
	}
	if m.closed.Load() {
		return Decision{}, ErrClosed
	}
	now := m.cfg.Clock.Now()
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return m.Take(ctx, l.key, limits, cost)
	}
	l.setLimits(limits)
	if cost > l.capacity {
		l.mu.Unlock()
		return Decision{Local: true, RetryAfter: Never}, nil
	}
	if now < l.blocked && cost >= l.blockFor {
		retry := l.blocked - now
		l.mu.Unlock()
		m.shortCircuits.Add(1)
		return Decision{Local: true, RetryAfter: retry}, nil
	}
	if b := l.balance.Load(); b >= cost && l.balance.CompareAndSwap(b, b-cost) {
		l.mu.Unlock() // filled while we waited for the lock
		return Decision{OK: true, Local: true, Remaining: b - cost}, nil
	}
	l.observe(m, now)
	req := TakeRequest{Key: l.key, Limits: limits, Want: max(l.size, cost), Min: cost, Now: m.storeNow(now)}
	l.pending++
	l.mu.Unlock()

	m.fetches.Add(1)
	res, err := m.cfg.Store.Take(ctx, req)
	now = m.cfg.Clock.Now()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending--
	if err != nil {
		m.storeErrors.Add(1)
		return Decision{}, fmt.Errorf("lease %q: %w", l.key, err)
	}
	if res.Granted == 0 {
		l.block(now, res.RetryAfter, cost)
		return Decision{Remaining: res.Remaining, RetryAfter: res.RetryAfter}, nil
	}
	l.spent += cost
	m.credit(l, res.Granted-cost, res.Now, now)
	return Decision{OK: true, Remaining: res.Remaining + l.balance.Load()}, nil
}

// prefetch starts an asynchronous take topping the balance up to B, unless one
// is in flight or the key is blocked.
func (m *LeaseManager) prefetch(l *lease) {
	if !l.inflight.CompareAndSwap(false, true) {
		return
	}
	now := m.cfg.Clock.Now()
	l.mu.Lock()
	if now < l.blocked || l.dead || m.closed.Load() {
		l.inflight.Store(false)
		l.mu.Unlock()
		return
	}
	l.observe(m, now)
	want := l.size - l.balance.Load()
	if want < 1 {
		l.inflight.Store(false)
		l.mu.Unlock()
		return
	}
	limits := l.limits
	l.mu.Unlock()
	m.fetches.Add(1)
	m.cfg.Dispatcher.Go(func(ctx context.Context) {
		now := m.cfg.Clock.Now()
		res, err := m.cfg.Store.Take(ctx, TakeRequest{Key: l.key, Limits: limits, Want: want, Min: 1, Now: m.storeNow(now)})
		now = m.cfg.Clock.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		defer l.inflight.Store(false)
		switch {
		case err != nil:
			// The next request below the watermark tries again; one that
			// finds the balance short goes to the store itself.
			m.storeErrors.Add(1)
		case res.Granted == 0:
			l.block(now, res.RetryAfter, 1)
		default:
			m.credit(l, res.Granted, res.Now, now)
		}
	})
}

// credit adds n granted tokens to l's balance, up to MaxLease, and gives
// back the rest. The caller holds l.mu.
func (m *LeaseManager) credit(l *lease, n, takenAt, now int64) {
	l.takenAt = takenAt
	l.expires = now + m.cfg.TTL
	if m.closed.Load() {
		m.giveBack(l, n, takenAt)
		return
	}
	for {
		b := l.balance.Load()
		add := clamp(m.cfg.MaxLease-b, 0, n)
		if l.balance.CompareAndSwap(b, b+add) {
			l.credited += add
			m.giveBack(l, n-add, takenAt)
			return
		}
	}
}

// giveBack returns n tokens to the store through the Dispatcher.
func (m *LeaseManager) giveBack(l *lease, n, takenAt int64) {
	if n <= 0 {
		return
	}
	req := ReturnRequest{Key: l.key, Limits: l.limits, N: n, TakenAt: takenAt, Now: m.storeNow(m.cfg.Clock.Now())}
	m.returned.Add(n)
	m.cfg.Dispatcher.Go(func(ctx context.Context) {
		if err := m.cfg.Store.Return(ctx, req); err != nil {
			m.storeErrors.Add(1) // the tokens come back when the bucket refills
		}
	})
}

// observe updates the lease size B from the tokens used since the last
// observation: an integer EWMA with time constant Lookahead,
// B ← Lookahead·(B + used)/(Lookahead + elapsed), whose fixed point under a
// steady rate r tokens/ms is r·Lookahead and which decays when traffic
// falls. The caller holds l.mu.
func (l *lease) observe(m *LeaseManager, now int64) {
	used := l.credited - l.drained - l.balance.Load() + l.spent
	if l.lastSeen == 0 {
		l.lastSeen, l.seenUsed = now, used
		return
	}
	elapsed := max(0, now-l.lastSeen)
	la := m.cfg.Lookahead
	size := la * (l.size + (used - l.seenUsed)) / (la + elapsed)
	l.size = clamp(size, m.cfg.MinLease, m.cfg.MaxLease)
	l.lowWater.Store(m.lowWater(l.size))
	l.lastSeen, l.seenUsed = max(l.lastSeen, now), used
}

// block makes requests costing cost or more fail locally for retryAfter ms.
// The caller holds l.mu.
func (l *lease) block(now, retryAfter, cost int64) {
	if retryAfter <= 0 {
		return // Never: such a cost is rejected without I/O anyway
	}
	l.blocked, l.blockFor = now+retryAfter, cost
}

func (m *LeaseManager) storeNow(now int64) int64 {
	if m.cfg.StoreClock {
		return 0
	}
	return now
}
