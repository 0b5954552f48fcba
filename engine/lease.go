package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
	// MinLease and MaxLease bound the lease size B (defaults 5 and
	// DefaultMaxLease).
	// Local balances never exceed MaxLease, so N instances strand at most
	// N × MaxLease tokens.
	MinLease, MaxLease int64
	// Lookahead is how many ms of observed traffic a lease should cover
	// (default 250): B = clamp(MinLease, observed rate × Lookahead,
	// MaxLease), smoothed with the same time constant.
	Lookahead int64
	// LowWaterPercent of B is the balance below which a prefetch starts
	// (default 25). LowWater, when set, replaces it.
	LowWaterPercent int64
	// LowWater is an absolute low watermark: when it is above 0, a prefetch
	// starts when the balance falls below min(LowWater, B) tokens, whatever
	// LowWaterPercent says (the policy's lease.low_watermark; its
	// low_watermark_percent maps to LowWaterPercent). A LowWater at or above
	// B keeps the balance topped up to B after every spend.
	LowWater int64
	// TTL is how long leased tokens stay local after the last fetch before
	// Sweep returns them to the store, in ms (default 10000).
	TTL int64
	// StoreClock makes store calls use the store's clock (Redis TIME, Now 0)
	// instead of Clock. Production sets it; simulations leave it off.
	StoreClock bool
	// Keys, when set, bounds the keys this manager and the others sharing it track
	// (KeyCap); nil tracks every key until Sweep forgets it.
	Keys *KeyCap
	// SingleGoroutine is the caller's promise that nothing calls the
	// manager (Take, TakeBytes, Sweep, Close, Stranded, Stats, and the
	// functions it hands the Dispatcher) from two goroutines at once, as
	// in a simulator's event loop. The manager then keeps its leases in a
	// plain map and takes no locks. Decisions are the same either way.
	SingleGoroutine bool
	// HandlesOnly is the caller's further promise, with SingleGoroutine,
	// that it reaches every key through one LeaseHandle or one LeaseRef
	// (with TakeRef) of its own, kept while the key's lease is live
	// (LeaseHandle.Live, LiveRef), and never by key.
	// The manager then keeps no index of its keys: a key seen a few times,
	// as most keys of a replayed log are, costs no map insert, lookup and
	// delete, which cost more than its decisions. Take and TakeBytes fail
	// with ErrHandlesOnly. Decisions are the same either way.
	HandlesOnly bool
}

// ErrClosed is returned by a LeaseManager after Close.
var ErrClosed = errors.New("lease manager closed")

// ErrHandlesOnly is returned by a keyed call on a LeaseManager or a Memory that
// keeps no index of its keys (LeaseConfig.HandlesOnly, NewHandlesOnlyMemory).
var ErrHandlesOnly = errors.New("keyed call on a store of handles only")

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
	single bool // cfg.SingleGoroutine
	// unindexed is cfg.HandlesOnly: local stays nil and live counts the
	// leases instead. Only such a manager, a single-goroutine one, writes
	// live after it is made, so it may sit among the fields a concurrent
	// manager writes once (TestManagerLayout keeps seen's cache line).
	unindexed bool
	live      int
	closed    atomic.Bool

	// seen is the latest Clock reading the manager made; local hits age
	// the last store reply's reset instant with it instead of reading
	// the clock. Every hit reads it, so the fields that a concurrent
	// manager writes often (the schedule's lock, the counters) start a
	// cache line after it: the fields before it are written once, and
	// the 56 bytes after it only by a single-goroutine manager.
	seen plainable

	local map[string]*lease // the leases when single; made with the first
	held  int64             // the sum of the leases' balances when single (Stranded)
	// spares are forgotten leases that a single-goroutine manager reuses
	// for new keys, oldest first from spareAt, instead of allocating a
	// lease (and its prefetch closure) for every key a replay brings.
	// Entries whose lease is no longer spare (a handle revived it) are
	// stale and skipped; nSpares counts those that are not.
	spares           []spareLease
	spareAt, nSpares int

	dueMu sync.Mutex // guards due, fresh and every lease's dueAt and freshAt
	due   dueHeap    // when Sweep must look at which lease next
	fresh []*lease   // new leases for Sweep to look at, nil where one was scheduled since
	// sweeping is a single-goroutine manager's batch of entries for Sweep
	// (takeDue), kept empty between Sweeps for the next one's batch.
	sweeping []dueEntry
	touched  int64 // what touch read, kept so that its loads are made

	fetches, shortCircuits, returned, storeErrors plainable

	leases sync.Map // key string → *lease, unless single
}

// lease is one key's local state. Its fields are laid out by use, so that a
// local hit reads one cache line and a visit from Sweep one to three: the
// struct is 312 bytes, allocated in the 320-byte size class, whose objects are
// cache-line aligned. The fields that mu guards are marked so.
type lease struct {
	// Line 1: what a local hit and every visit from Sweep read.
	balance  plainable    // tokens spendable without I/O
	lowWater atomic.Int32 // prefetch below this balance (at most MaxInt32: setLowWater)
	// left is what the store reported the key holds at its last reply (at most MaxUint32, the
	// most an RLS status carries): a hit reports it plus the balance, as the reply did.
	left    atomic.Uint32
	resetAt atomic.Int64 // local ms: the last store reply's reset instant
	expires int64        // mu; local ms: Sweep returns the balance from then on
	blocked int64        // mu; local ms: requests costing blockFor or more are denied before
	// dueAt is the time of the lease's live entry in m.due (notDue when
	// it has none); other entries for it are stale. freshAt is 1 + the
	// lease's index in m.fresh while it is there, else 0. Guarded by
	// m.dueMu.
	dueAt    int64
	limiting atomic.Int32 // the last store reply's Limiting
	inflight atomic.Bool  // a prefetch is on its way
	freshAt  int32
	// gen counts the lives of the lease object: a single-goroutine manager
	// makes a forgotten lease its key's lease again, or a new key's
	// (spare), rather than allocate one. A handle that holds it from an
	// earlier life looks its key up again, and entries in the due heap
	// from an earlier life are stale whatever their time. It changes only
	// while no goroutine but the owner's can see l.
	gen uint32

	// Line 2: what a return of the balance to the store reads.
	key string
	// The key's limits are the nLimits at limitsAt (limits), set under mu (setLimits).
	// limitsAt is atomic so that a keyed Take sees, without the lock, that a reload gave
	// the key other limits.
	limitsAt atomic.Pointer[Limit]
	nLimits  int32
	smallest int32 // mu; index of the limit with the least capacity
	takenAt  int64 // mu; store time of the last grant
	// Spends take the oldest tokens first, so the balance holds up to
	// lastAdd tokens of the last grant (taken at takenAt) and the rest from
	// earlier grants, taken no earlier than olderAt (mu). A return gives
	// each part back at its own time: a window's count is lowered only by
	// tokens taken in it (leftover).
	olderAt int64
	// hint lets a single-goroutine Memory find the key's state without
	// hashing the key (storeHint). Only the store touches it.
	hint storeHint

	// Line 3.
	drained int64 // mu; tokens ever removed from balance by returns
	pending int32 // mu; synchronous takes in flight
	// dry (mu) is set when the store's last reply denied the key or left it less than a
	// batch: the key is at its limit. While a store call for a dry key is in flight,
	// requests that find the balance short are denied locally instead of making calls of
	// their own.
	dry     bool
	replied bool // mu; resetAt and limiting hold a store reply
	dead    bool // mu; removed by Sweep or evicted; look the key up again
	spare   bool // dead and in m.spares, to be reused
	m       *LeaseManager
	// fetch is the prefetch handed to the Dispatcher, made at the lease's
	// first prefetch (most leases never prefetch) so that later ones do
	// not allocate; fetchWant and fetchLimits are its arguments, owned by
	// the prefetch in flight.
	fetch       func(context.Context)
	fetchWant   int64
	fetchLimits []Limit

	mu       sync.Mutex // guards the fields marked mu, unless single
	size     int64      // mu; B
	credited int64      // mu; tokens ever added to balance
	spent    int64      // mu; tokens spent directly by synchronous takes
	seenUsed int64      // mu; used() at lastSeen
	lastSeen int64      // mu; local ms of the last observation
	blockFor int64      // mu
	// returnedAt (mu) is the local ms of the latest return of tokens: those the balance
	// could not hold (credit), or its own at expiry (Sweep) or a relimit, 0 for none.
	// Until returnGrace ms after it a reply that says the store is empty holds the key
	// only until then (graceHold): it may have been computed before the return landed.
	// (A time, not a count of returns in flight, so that a journal replays it exactly.)
	returnedAt int64
	// lastAdd (mu) is how many tokens the last grant added to the balance,
	// at most MaxInt32: a larger grant's excess counts as older, which a
	// return refunds no more than is due.
	lastAdd int32
	rate    admitted // mu; the key's admitted rate, for the fallback bound
}

// Decision is the outcome of LeaseManager.Take.
type Decision struct {
	// OK reports whether the request is admitted.
	OK bool
	// Local reports that no store call was made: a hit on the local
	// balance, or a short-circuited denial.
	Local bool
	// Remaining is what the key can still grant: what the store reported
	// it holds at its last reply, plus the local balance after the
	// request (after a denial by the store, what it reported).
	Remaining int64
	// RetryAfter is, for a denial, the ms until the request could succeed,
	// or Never.
	RetryAfter int64
	// ResetAfter is the time in ms until the tightest limit is full again
	// (token bucket) or its window ends: RLS duration_until_reset.
	// Limiting is the index in limits of that tightest limit, whose
	// headers to report. After a store call (Local false) both are the
	// store's Result.ResetAfter and Result.Limiting for that call: the
	// shared bucket after the lease was debited. A local decision reports
	// the key's latest store reply (a take or a prefetch), with
	// ResetAfter counted down to now: on a hit, to the latest time the
	// manager read its Clock (at every store call, prefetch and Sweep),
	// so that a hit reads no clock, which can overstate ResetAfter by the
	// time since; on a local denial, to the Clock's now. A cost above a
	// limit's capacity on a key that has no store reply yet reports the
	// limit with the least capacity and its RefillMs, the longest a reset
	// can take.
	ResetAfter int64
	Limiting   int
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

// DefaultMaxLease is LeaseConfig.MaxLease when it is left 0: the most tokens
// one manager holds of a key.
const DefaultMaxLease = 500

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
	def(&cfg.MaxLease, DefaultMaxLease)
	def(&cfg.Lookahead, 250)
	def(&cfg.LowWaterPercent, 25)
	def(&cfg.TTL, 10_000)
	if cfg.MinLease < 1 || cfg.MaxLease < cfg.MinLease || cfg.Lookahead < 1 || cfg.LowWaterPercent < 0 || cfg.LowWater < 0 || cfg.TTL < 1 {
		return nil, fmt.Errorf("lease manager: bad config: min %d max %d lookahead %d low water %d%% or %d ttl %d",
			cfg.MinLease, cfg.MaxLease, cfg.Lookahead, cfg.LowWaterPercent, cfg.LowWater, cfg.TTL)
	}
	if cfg.HandlesOnly && !cfg.SingleGoroutine {
		return nil, errors.New("lease manager: HandlesOnly needs SingleGoroutine")
	}
	if cfg.Dispatcher == nil {
		cfg.Dispatcher = DispatchFunc(func(fn func(context.Context)) { fn(context.Background()) })
	}
	return &LeaseManager{cfg: cfg, single: cfg.SingleGoroutine, unindexed: cfg.HandlesOnly}, nil
}

// Take decides a request of cost tokens on key, whose limits are limits: the
// same slice for every call with that key, until a reload compiles the rule
// anew. A slice of other figures changes the key's limits (relimit): the
// tokens the key holds under the old ones go back to the store, and the new
// ones hold from this request on. It returns an error for an invalid cost,
// after Close, and when the store fails; the caller then applies its
// fail-open or fail-closed rule.
func (m *LeaseManager) Take(ctx context.Context, key string, limits []Limit, cost int64) (d Decision, err error) {
	if m.unindexed {
		return d, ErrHandlesOnly
	}
	l := m.lookup(key, false, limits)
	if !l.hasLimits(limits) {
		m.relimitLocked(l, limits)
	}
	if rest, ok := m.spend(l, cost); ok {
		m.refill(l, rest)
		m.hit(&d, l, rest)
		return d, nil
	}
	return m.slow(ctx, l, limits, cost)
}

// TakeBytes is Take for a key built with AppendKey into a reused buffer: it
// copies the key only the first time it sees it, so the request path stays
// free of allocations. key may be reused once TakeBytes returns.
func (m *LeaseManager) TakeBytes(ctx context.Context, key []byte, limits []Limit, cost int64) (d Decision, err error) {
	if m.unindexed {
		return d, ErrHandlesOnly
	}
	// The unsafe view is only looked up; lookup clones it before storing it.
	l := m.lookup(unsafe.String(unsafe.SliceData(key), len(key)), true, limits)
	if !l.hasLimits(limits) {
		m.relimitLocked(l, limits)
	}
	if rest, ok := m.spend(l, cost); ok {
		m.refill(l, rest)
		m.hit(&d, l, rest)
		return d, nil
	}
	return m.slow(ctx, l, limits, cost)
}

// spend takes cost tokens from l's local balance if it covers them and
// returns the balance left. A single-goroutine manager does it with plain
// loads and stores, sparing the locked instruction of a compare-and-swap.
func (m *LeaseManager) spend(l *lease, cost int64) (int64, bool) {
	if m.single {
		b := l.balance.v
		if b < cost || cost < 1 {
			return 0, false
		}
		l.balance.v = b - cost
		m.held -= cost
		return b - cost, true
	}
	for {
		b := l.balance.Load()
		if b < cost || cost < 1 {
			return 0, false
		}
		if l.balance.CompareAndSwap(b, b-cost) {
			return b - cost, true
		}
	}
}

// refill starts a prefetch when the balance left, rest, is below the low
// watermark and none is in flight. It is inlined; prefetch is not.
func (m *LeaseManager) refill(l *lease, rest int64) {
	if rest < int64(l.lowWater.Load()) {
		m.prefetch(l)
	}
}

// hit fills in d for a request spent from the local balance, leaving rest.
// It sets d's fields one by one, and is inlined: a Decision has too many
// fields to live in registers, and building it as a literal and copying it
// costs a hit a third of its time.
func (m *LeaseManager) hit(d *Decision, l *lease, rest int64) {
	d.OK, d.Local, d.Remaining = true, true, rest+int64(l.left.Load())
	d.ResetAfter = max(0, l.resetAt.Load()-m.seen.Load())
	d.Limiting = int(l.limiting.Load())
}

// lookup returns key's lease, making it if there is none. clone says key is
// a borrowed view to copy before it is stored. A manager of handles only
// makes one: the key's handle looks it up only when it has no live lease.
func (m *LeaseManager) lookup(key string, clone bool, limits []Limit) *lease {
	if m.unindexed {
		l := m.spare()
		m.renew(l, key, limits)
		m.live++
		m.enlist(l)
		m.tracking(l)
		return l
	}
	if m.single {
		if l := m.local[key]; l != nil {
			return l
		}
	} else if v, ok := m.leases.Load(key); ok {
		return v.(*lease)
	}
	if clone {
		key = strings.Clone(key)
	}
	l := m.spare()
	m.renew(l, key, limits)
	if m.single {
		if m.local == nil {
			m.local = make(map[string]*lease)
		}
		m.local[key] = l
	} else if v, loaded := m.leases.LoadOrStore(key, l); loaded {
		return v.(*lease)
	}
	m.enlist(l)
	m.tracking(l)
	return l
}

// relookup is lookup of the key of l, a lease Sweep forgot and nothing has
// reused yet. A single-goroutine manager makes l itself the key's lease
// again, fresh, in a new life, rather than take another each time a key
// that Sweep forgets comes back (l keeps its store hint for the key),
// unless a keyed Take made the key a new lease meanwhile. Handles that
// still hold l then look the key up again and find l.
func (m *LeaseManager) relookup(l *lease, limits []Limit) *lease {
	if !m.single || l.gen == math.MaxUint32 || (!m.unindexed && m.local[l.key] != nil) {
		return m.lookup(l.key, false, limits)
	}
	if l.spare {
		l.spare = false // its entries in m.spares are stale now
		m.nSpares--
	}
	m.renew(l, l.key, limits)
	if m.unindexed {
		m.live++
	} else {
		m.local[l.key] = l
	}
	m.enlist(l)
	m.tracking(l)
	return l
}

// spare returns a lease to make a new key's: the oldest spare of a
// single-goroutine manager, if it was forgotten long enough ago (spareAge),
// or else a new lease.
func (m *LeaseManager) spare() *lease {
	age := int64(spareAge)
	if m.unindexed {
		age = 0
	}
	for m.nSpares > 0 { // never on a concurrent manager
		s := m.spares[m.spareAt]
		if m.seen.v-s.at < age {
			break // the oldest spare is too young, and so are the others
		}
		m.spares[m.spareAt] = spareLease{}
		m.spareAt++
		if !s.ok() {
			continue
		}
		s.l.spare = false
		if m.nSpares--; m.nSpares == 0 {
			clear(m.spares[m.spareAt:]) // leases revived since
			m.spares, m.spareAt = m.spares[:0], 0
		}
		return s.l
	}
	return &lease{}
}

// spareLease is a spare lease, in its life gen, and when it was forgotten
// (local ms, about).
type spareLease struct {
	l   *lease
	at  int64
	gen uint32
}

// ok reports whether s is still spare: its lease was not revived since.
func (s *spareLease) ok() bool { return s.l.spare && s.l.gen == s.gen }

// keepSpare keeps l, which forget just made dead, for reuse, unless the
// manager keeps enough spares for its number of leases already.
func (m *LeaseManager) keepSpare(l *lease) {
	if !m.single || m.nSpares >= max(maxSpares, m.leaseCount()/4) || l.gen == math.MaxUint32 {
		return // a generation is never used twice
	}
	if n := len(m.spares) - m.spareAt; n > 2*(m.nSpares+maxSpares) {
		// Mostly leases revived since: keep the spares, in order.
		kept := m.spares[:0]
		for _, s := range m.spares[m.spareAt:] {
			if s.ok() {
				kept = append(kept, s)
			}
		}
		clear(m.spares[len(kept):])
		m.spares, m.spareAt = kept, 0
	}
	l.spare = true
	m.nSpares++
	m.spares = append(m.spares, spareLease{l: l, at: m.seen.v, gen: l.gen})
}

// trimSpares lets go of the oldest spares while the manager keeps more
// than keepSpare would now, as after a flood of keys that Sweep forgot:
// their memory goes back to the garbage collector.
func (m *LeaseManager) trimSpares() {
	for m.nSpares > max(maxSpares, m.leaseCount()/4) {
		s := m.spares[m.spareAt]
		m.spares[m.spareAt] = spareLease{}
		m.spareAt++
		if s.ok() {
			s.l.spare = false
			m.nSpares--
		}
	}
	if n := len(m.spares) - m.spareAt; cap(m.spares) > shrinkAbove && n <= cap(m.spares)/4 {
		m.spares, m.spareAt = append(make([]spareLease, 0, 2*n), m.spares[m.spareAt:]...), 0
	}
}

// leaseCount is the number of live leases of a single-goroutine manager.
func (m *LeaseManager) leaseCount() int {
	if m.unindexed {
		return m.live
	}
	return len(m.local)
}

// maxSpares is how many spare leases a manager with few leases keeps; one
// with more keeps a quarter of its number of leases.
const maxSpares = 8

// spareAge is how long ago a spare lease must have been forgotten to be
// reused for a new key: a key that comes back after Sweep forgot its lease
// finds the lease itself (relookup) while it is spare, which spares the
// store a lookup of the key (the lease's hint is for it) and the manager a
// lease; a key that has stayed away this long has mostly gone for good,
// as the store's own state of it does. In a simulated replay of 1,000,000
// lines, reusing spares of any age took 448,000 of them but sent 188,000
// handles that came back to look their key up again; from this age on,
// 77,000 and 8,000.
//
// A manager of handles only reuses spares of any age: its caller keeps each
// key's state itself (simulate's store state is a MemoryCell, which no hint
// needs to find), so a key that comes back costs it no more than a new key,
// while a lease from fresh memory costs a page fault or a cache miss. That
// made the same replay about 6 % faster.
const spareAge = MinTTL

// renew makes l a new lease of key in a new life (gen), keeping its prefetch
// closure and its store hint (checked by the store before use) unless that is
// a cell (storeHint.renewed).
func (m *LeaseManager) renew(l *lease, key string, limits []Limit) {
	*l = lease{key: key, m: m, size: m.cfg.MinLease, dueAt: notDue, gen: l.gen + 1, fetch: l.fetch, hint: l.hint.renewed()}
	l.setLimits(limits)
	l.setLowWater(m.lowWater(l.size))
}

// setLowWater sets the balance below which a prefetch starts, capped at MaxInt32 so that it
// shares a word of the lease's first line with left: a lease of more than two billion tokens
// prefetches once its balance is under that.
func (l *lease) setLowWater(v int64) {
	l.lowWater.Store(int32(min(v, math.MaxInt32)))
}

// limits returns the key's limits. The caller holds l.mu or owns l.
func (l *lease) limits() []Limit {
	return unsafe.Slice(l.limitsAt.Load(), l.nLimits)
}

// hasLimits reports whether limits are the key's limits as the lease last
// recorded them: the same slice, which a caller passes for every call until a
// reload compiles new ones. It reads one atomic word, without the lock.
func (l *lease) hasLimits(limits []Limit) bool {
	return l.limitsAt.Load() == unsafe.SliceData(limits)
}

// sameLimits reports whether limits are, in value, the key's limits as the
// lease last recorded them. The caller holds l.mu or owns l.
func (l *lease) sameLimits(limits []Limit) bool {
	return (l.hasLimits(limits) && len(limits) == int(l.nLimits)) || slices.Equal(l.limits(), limits)
}

// setLimits records the key's limits and the largest cost they can ever
// grant. The caller holds l.mu or owns l.
func (l *lease) setLimits(limits []Limit) {
	if l.hasLimits(limits) && len(limits) == int(l.nLimits) {
		return
	}
	l.limitsAt.Store(unsafe.SliceData(limits))
	l.nLimits, l.smallest = int32(len(limits)), 0
	for i, lim := range limits {
		if lim.Capacity() < limits[l.smallest].Capacity() {
			l.smallest = int32(i)
		}
	}
}

// relimitLocked is relimit under l's lock, now: a keyed Take calls it for a slice of limits
// other than the lease's, and then decides as it would have with the lease's own. The same
// figures in another slice cost the lock and nothing else: the decision, and the prefetch it
// starts, are those of the same slice (a journal replay, which builds a limit override's
// limits for each decision, decides as the enforcer that kept one slice did).
func (m *LeaseManager) relimitLocked(l *lease, limits []Limit) {
	m.lock(l)
	defer m.unlock(l)
	if l.sameLimits(limits) {
		l.setLimits(limits) // without reading the clock, which a hit's figures follow
		return
	}
	m.relimit(l, limits, m.now())
}

// relimit gives the key limits, at local time now. When they differ from
// the lease's (a reload changed the rule), what the lease holds was granted
// under the old ones: it goes back to the store, as those limits granted it,
// and so does what a prefetch in flight brings (landFetch), so that a key
// kept busy is held to its new limits from its next request rather than
// refilled under the old ones for as long as it stays busy. What the lease
// learnt of the key under the old limits goes too: its hold as a dry key,
// the figures of the last store reply and its admitted rate (the fail-open
// bound doubles it). Only its batch size, an estimate of demand, stays. The
// caller holds l.mu.
func (m *LeaseManager) relimit(l *lease, limits []Limit, now int64) {
	if l.sameLimits(limits) {
		l.setLimits(limits)
		return
	}
	last, older := m.leftover(l, now)
	l.setLimits(limits)
	l.blocked, l.blockFor, l.dry, l.replied, l.rate = 0, 0, false, false, admitted{}
	l.resetAt.Store(0)
	l.limiting.Store(0)
	l.left.Store(0)
	if last.N+older.N > 0 {
		l.returnedAt = max(now, 1)
	}
	m.returnLater(older)
	m.returnLater(last)
}

// capacity is the largest cost the key's limits can ever grant. The caller
// holds l.mu or owns l.
func (l *lease) capacity() int64 {
	if l.nLimits == 0 {
		return MaxExact
	}
	return min(MaxExact, l.limits()[l.smallest].Capacity())
}

// lowWater is the balance below which a prefetch starts for lease size B.
func (m *LeaseManager) lowWater(size int64) int64 {
	if m.cfg.LowWater > 0 {
		return min(m.cfg.LowWater, size)
	}
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
	now := m.now()
	m.lock(l)
	if l.dead {
		m.unlock(l)
		return m.Take(ctx, l.key, limits, cost)
	}
	m.relimit(l, limits, now)
	if cost > l.capacity() {
		d := Decision{Local: true, RetryAfter: Never, Limiting: int(l.smallest), ResetAfter: limits[l.smallest].RefillMs()}
		if l.replied {
			d.Limiting, d.ResetAfter = int(l.limiting.Load()), max(0, l.resetAt.Load()-now)
		}
		m.unlock(l)
		return d, nil
	}
	if now < l.blocked && cost >= l.blockFor {
		d := Decision{Local: true, RetryAfter: l.blocked - now, Limiting: int(l.limiting.Load()), ResetAfter: max(0, l.resetAt.Load()-now)}
		m.unlock(l)
		m.shortCircuits.add(m.single, 1)
		return d, nil
	}
	if b := l.balance.Load(); b >= cost && l.balance.CompareAndSwap(b, b-cost) {
		// Filled while we waited for the lock.
		if m.single {
			m.held -= cost
		}
		d := Decision{OK: true, Local: true, Remaining: b - cost + int64(l.left.Load()), Limiting: int(l.limiting.Load()), ResetAfter: max(0, l.resetAt.Load()-now)}
		m.unlock(l)
		return d, nil
	}
	if l.dry && (l.pending > 0 || l.inflight.Load()) {
		// The key is at its limit and a call that may refill it is on its way: one call in
		// flight per key is all an over-limit key costs the store, and nobody waits for it.
		d := Decision{Local: true, RetryAfter: 1, Limiting: int(l.limiting.Load()), ResetAfter: max(1, l.resetAt.Load()-now)}
		m.unlock(l)
		m.shortCircuits.add(m.single, 1)
		return d, nil
	}
	l.observe(m, now)
	req := TakeRequest{Key: l.key, Limits: limits, Want: max(l.size, cost), Min: cost, Now: m.storeNow(now), hint: &l.hint}
	l.pending++
	m.unlock(l)

	m.fetches.add(m.single, 1)
	res, err := m.cfg.Store.Take(ctx, req)
	now = m.now()

	if late := lateOf(err); late != nil {
		// The call goes on: it stays in flight (pending) until it lands, and its reply is
		// then taken as a prefetch's. This request is decided without it.
		m.storeErrors.add(m.single, 1)
		t := &lateTake{m: m, l: l, owed: cost, limits: limits}
		late.Then(func(res Result, err error) { m.landLate(l, limits, res, err, t) })
		return Decision{}, &lateTakeError{err: fmt.Errorf("lease %q: %w", l.key, err), take: t}
	}
	return m.landSync(l, limits, cost, now, res, err)
}

// landSync takes the reply of slow's store call, a synchronous take of cost that landed at now
// with res or err, and decides the request by it. It is slow's own tail, a function of its own
// so that its deferred calls are the compiler's open-coded ones: in slow, among a dozen
// returns, every return paid the runtime's search for deferred calls, even the early ones.
func (m *LeaseManager) landSync(l *lease, limits []Limit, cost, now int64, res Result, err error) (Decision, error) {
	m.lock(l)
	defer m.unlock(l)
	defer m.settled(l)
	l.pending--
	if err != nil {
		m.storeErrors.add(m.single, 1)
		return Decision{}, fmt.Errorf("lease %q: %w", l.key, err)
	}
	d := Decision{Remaining: res.Remaining, RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter, Limiting: res.Limiting}
	if !l.sameLimits(limits) {
		// A request of the config before a reload, or after it, changed the key's limits
		// while this one waited (relimit): the reply decides this request, under the
		// limits it was made with, and what it granted beyond the cost goes back.
		if res.Granted > 0 {
			d.OK = true
			l.spent += cost
			m.giveBackAs(l, limits, res.Granted-cost, res.Now)
		}
		return d, nil
	}
	m.landed(l, now, limits, res, cost)
	if res.Granted == 0 {
		if res.RetryAfter != Never {
			// This instance asks again only once a batch can have refilled.
			d.RetryAfter = max(d.RetryAfter, l.blocked-now)
		}
		return d, nil
	}
	l.spent += cost
	m.credit(l, res.Granted-cost, res.Now, now)
	d.OK, d.Remaining = true, res.Remaining+l.balance.Load()
	return d, nil
}

// landLate takes the reply of a synchronous take whose request stopped waiting for it (Late):
// the call is no longer in flight, and what it granted joins the balance, but for what t's
// request spent of it (lateTake.spend).
func (m *LeaseManager) landLate(l *lease, limits []Limit, res Result, err error, t *lateTake) {
	now := m.now()
	m.lock(l)
	defer m.unlock(l)
	l.pending--
	t.landed = true
	if err == nil {
		t.withheld, t.takenAt = min(t.owed, max(res.Granted, 0)), res.Now
	}
	n := res.Granted - t.withheld
	switch {
	case err != nil:
	case !l.sameLimits(limits):
		// A reload changed the key's limits while the call was on its way (relimit).
		m.giveBackAs(l, limits, n, res.Now)
	default:
		m.landed(l, now, limits, res, 1)
		if n > 0 && !l.dead {
			m.credit(l, n, res.Now, now)
		} else if n > 0 {
			m.giveBack(l, n, res.Now) // Sweep or an eviction forgot the key meanwhile
		}
	}
	if !l.dead {
		m.settled(l)
	}
}

// lateTake is a synchronous take that went on after its request stopped waiting for it (Late).
// The request may be admitted all the same, without the store (a fail-open rule's local bound,
// RulePlan.Decide), and then its cost comes out of what the take grants: the store counted the
// take, so crediting the whole grant to the lease would let another request spend the cost
// again. Measured before: a fail-open rule of 300 an hour on a Redis slow enough for late
// replies admitted 312, one extra per late reply. So the cost is owed from the start, and
// withheld from the grant when it lands; Decide releases it when the request was not admitted.
// (Charging the balance after the fact missed tokens others had spent meanwhile.)
type lateTake struct {
	m      *LeaseManager
	l      *lease
	limits []Limit // the take's
	// owed is the cost withheld from the grant when it lands, and withheld what was, of a
	// grant taken at takenAt; landed says it has. All l.mu.
	owed, withheld, takenAt int64
	landed                  bool
}

// release gives up the cost t's request owes, when the request was not admitted after all:
// before the grant lands nothing is withheld of it, and after, what was withheld goes back to
// the store.
func (t *lateTake) release(cost int64) {
	m, l := t.m, t.l
	m.lock(l)
	defer m.unlock(l)
	if !t.landed {
		t.owed = max(0, t.owed-cost)
		return
	}
	if n := min(cost, t.withheld); n > 0 {
		t.withheld -= n
		m.giveBackAs(l, t.limits, n, t.takenAt)
	}
}

// lateTakeError is the error of a take that went on after its request stopped waiting: the
// store's (a Late, through Unwrap), and the take, for RulePlan.Decide.
type lateTakeError struct {
	err  error
	take *lateTake
}

func (e *lateTakeError) Error() string { return e.err.Error() }
func (e *lateTakeError) Unwrap() error { return e.err }

// lateTakeOf returns the lateTake of err, or nil.
func lateTakeOf(err error) *lateTake {
	var e *lateTakeError
	if errors.As(err, &e) {
		return e.take
	}
	return nil
}

// giveBack returns n tokens to the store through the Dispatcher.
func (m *LeaseManager) giveBack(l *lease, n, takenAt int64) {
	m.giveBackAs(l, l.limits(), n, takenAt)
}

// giveBackAs returns n tokens, granted under limits, to the store through the
// Dispatcher.
func (m *LeaseManager) giveBackAs(l *lease, limits []Limit, n, takenAt int64) {
	if n <= 0 {
		return
	}
	m.returnLater(ReturnRequest{Key: l.key, Limits: limits, N: n, TakenAt: takenAt, Now: m.storeNow(m.now()), hint: &l.hint})
}

// returnLater makes return req through the Dispatcher (returnBoth's
// asynchronous twin).
func (m *LeaseManager) returnLater(req ReturnRequest) {
	if req.N <= 0 {
		return
	}
	m.returned.add(m.single, req.N)
	m.cfg.Dispatcher.Go(func(ctx context.Context) {
		if err := m.cfg.Store.Return(ctx, req); err != nil {
			m.storeErrors.add(m.single, 1) // the tokens come back when the bucket refills
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
	l.setLowWater(m.lowWater(l.size))
	l.lastSeen, l.seenUsed = max(l.lastSeen, now), used
}

// landed records a store reply res to a take of cost tokens (at least) on l's
// key with limits, at local time now: the figures local decisions report, the
// admitted rate, and whether the key is at its limit.
//
// A key the store denied, or whose grant left the store less than a batch, is
// dry: it is rejected locally, once its balance is spent, until enough tokens
// can have refilled for a batch (batchWait), and then one store call at a time
// asks for the next batch. So an over-limit key costs the store about one call
// per batch that refills, whatever the rate of the requests for it. A key
// within its limit leaves the store more than a batch and never waits. The
// caller holds l.mu.
func (m *LeaseManager) landed(l *lease, now int64, limits []Limit, res Result, cost int64) {
	l.replied = true
	l.resetAt.Store(now + res.ResetAfter)
	l.limiting.Store(int32(res.Limiting))
	l.left.Store(uint32(min(max(res.Remaining, 0), math.MaxUint32)))
	l.rate.sample(l, now)
	lim := limits[min(max(res.Limiting, 0), len(limits)-1)]
	batch := m.dryBatch(l, lim)
	switch {
	case res.Granted == 0:
		l.dry = true
		if res.RetryAfter != Never { // a cost above capacity is rejected without I/O anyway
			hold := res.RetryAfter // when cost tokens are back; a fixed window's are all back then
			if lim.Algorithm != FixedWindow {
				hold += batchWait(lim, batch-cost, res.ResetAfter)
			}
			l.block(now, l.graceHold(now, hold), cost)
		}
	case res.Remaining < batch && (lim.Algorithm != FixedWindow || res.Remaining == 0):
		// A fixed window's leftover is gone when the window ends: the next take collects
		// it, and only an empty window is waited out.
		l.dry = true
		l.block(now, l.graceHold(now, batchWait(lim, batch-res.Remaining, res.ResetAfter)), 1)
	default:
		l.dry = false
	}
}

// returnGrace is how long after a return of tokens the balance could not hold a
// reply that says the store is empty is not trusted to hold the key: about the
// longest a return takes to land.
const returnGrace = 100

// graceHold is the hold of a key the store says is empty, hold ms, unless l gave
// tokens back within returnGrace ms: the reply may predate the return's landing,
// so the key is held only until the grace ends and then asks once more.
func (l *lease) graceHold(now, hold int64) int64 {
	if l.returnedAt > 0 && now-l.returnedAt < returnGrace {
		return min(hold, l.returnedAt+returnGrace-now)
	}
	return hold
}

// dryLookahead is the most ms of its limit's refill a key at its limit waits for
// before it asks the store again: about ten store calls a second for each
// instance, whatever the rate of the attack on the key.
const dryLookahead = 100

// dryBatch is the batch a key at its limit waits for: what the limit's own
// sustained rate refills in min(Lookahead, dryLookahead) ms, within MinLease and
// MaxLease (such a key is admitted that rate, not its demand); and no more than
// B itself, nor than half the limit's capacity, so that the bucket never fills
// up while the key is held and no refill is lost. Less waiting would cost more
// store calls; more would leave more tokens unclaimed in the store at any time.
func (m *LeaseManager) dryBatch(l *lease, lim Limit) int64 {
	la := min(m.cfg.Lookahead, dryLookahead, lim.Window)
	perLookahead := m.cfg.MaxLease
	if lim.Requests <= MaxExact/la {
		perLookahead = clamp(lim.Requests*la/lim.Window, m.cfg.MinLease, m.cfg.MaxLease)
	}
	return max(1, min(l.size, perLookahead, lim.Capacity()/2))
}

// batchWait is how long, in ms, limit l takes to refill n more tokens at its
// sustained rate: a token bucket and a sliding window regain Requests per
// Window continuously; a fixed window regains them when the window ends, in
// resetAfter ms. It is the local hold of a dry key, an estimate that decides
// only when to ask the store again, never what it grants.
func batchWait(l Limit, n, resetAfter int64) int64 {
	if n <= 0 {
		return 0
	}
	switch l.Algorithm {
	case FixedWindow:
		return resetAfter
	case TokenBucket:
		tu, rate := l.units()
		return ceilDiv(min(n, l.Capacity())*tu, rate)
	default:
		return ceilDiv(min(n, l.Requests)*l.Window, l.Requests)
	}
}

// block makes requests costing cost or more fail locally for retryAfter ms.
// The caller holds l.mu.
func (l *lease) block(now, retryAfter, cost int64) {
	if retryAfter <= 0 {
		return
	}
	l.blocked, l.blockFor = now+retryAfter, cost
}

// settled tells Sweep that a store call on l has landed or a prefetch was
// called off: a lease it kept for the call (or for a longer block) may now
// be forgotten sooner. The caller holds l.mu.
func (m *LeaseManager) settled(l *lease) {
	m.scheduleBy(l, max(l.expires+m.cfg.TTL, l.blocked))
}

func (m *LeaseManager) storeNow(now int64) int64 {
	if m.cfg.StoreClock {
		return 0
	}
	return now
}
