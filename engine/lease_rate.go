package engine

// This file holds what a LeaseManager knows of a key's admitted rate, and the
// local bound it gives a fail-open rule while the store is unavailable.

// rateTau is the time constant, in ms, of a key's admitted-rate average: a
// second, so that the average is in tokens per second.
const rateTau = 1000

// admitted is a key's recently admitted rate: an integer moving average of
// the tokens the key spent, in tokens per second, sampled at every store
// reply. It is sampled only when the store answers, so an outage freezes it
// at what the key was admitted before the outage began: the baseline that the
// fallback bound doubles. Guarded by the lease's mu.
type admitted struct {
	perSec int64 // the average, tokens per second
	used   int64 // tokens spent at the last sample
	at     int64 // local ms of the last sample
	since  int64 // local ms of the first sample
	on     bool  // sampled at least once

	// bound caches the fallback bucket made from perSec (fallbackOf), so
	// that an outage does not make one per request. A pointer, not a
	// slice: most keys never need one, and every lease carries the field.
	bound *[1]Limit
}

// sample updates the average with the tokens l spent since the last sample:
// perSec ← (rateTau·perSec + 1000·spent) / (rateTau + elapsed), whose fixed
// point under a steady r tokens/ms is 1000·r and which decays when traffic
// falls.
func (a *admitted) sample(l *lease, now int64) {
	used := l.credited - l.drained - l.balance.Load() + l.spent
	if !a.on {
		a.on, a.used, a.at, a.since = true, used, now, now
		return
	}
	elapsed := now - a.at
	if elapsed <= 0 {
		return // the tokens count at the next sample
	}
	// Clamped so that neither product can leave int64, however long the
	// key idled or however much it spent.
	spent := clamp(used-a.used, 0, MaxExact/rateTau)
	if a.at == a.since {
		// The first interval starts the average at its own rate rather than at 0, which
		// would take several time constants to forget.
		a.perSec = 1000 * spent / elapsed
	} else {
		a.perSec = (rateTau*min(a.perSec, MaxExact/rateTau) + 1000*spent) / (rateTau + min(elapsed, MaxExact))
	}
	a.used, a.at = used, now
}

// known reports whether the average covers at least one time constant of
// store replies: a key seen once has no history to double.
func (a *admitted) known() bool {
	return a.on && a.at-a.since >= rateTau
}

// FallbackFactor is how many times its recently admitted rate a key of a
// fail-open rule without a fallback of its own may be admitted while the
// store is unavailable: the seed's "2x average baseline".
const FallbackFactor = 2

// fallbackOf returns the local bucket that caps key while the store is
// unavailable, for a fail-open rule without a fallback of its own:
// FallbackFactor times the key's recently admitted rate on this manager, per
// second, with a second's worth of burst (at least cost); or def when the
// manager has no history of the key.
func (m *LeaseManager) fallbackOf(key string, def []Limit, cost int64) []Limit {
	l := m.find(key)
	if l == nil {
		return def
	}
	m.lock(l)
	defer m.unlock(l)
	a := &l.rate
	if l.dead || !a.known() {
		return def
	}
	perSec := clamp(FallbackFactor*a.perSec, 1, MaxExact/2000)
	burst := max(perSec, cost)
	if a.bound != nil && a.bound[0].Requests == perSec && a.bound[0].Burst == burst {
		return a.bound[:]
	}
	b := &[1]Limit{{Algorithm: TokenBucket, Requests: perSec, Window: 1000, Burst: burst}}
	if b[0].Validate() != nil {
		return def
	}
	a.bound = b
	return b[:]
}

// find returns key's live lease, or nil.
func (m *LeaseManager) find(key string) *lease {
	if m.single {
		return m.local[key]
	}
	if v, ok := m.leases.Load(key); ok {
		return v.(*lease)
	}
	return nil
}
