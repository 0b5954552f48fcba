package enforcer

import (
	"testing"

	"github.com/rlctl/rlctl/engine"
)

func TestBreakerSteps(t *testing.T) {
	var now int64
	var changes []string
	b := newBreaker(3, 1000, engine.ClockFunc(func() int64 { return now }), func(from, to BreakerState) {
		changes = append(changes, from.String()+">"+to.String())
	})
	type step struct {
		t      int64
		call   bool // Allow, then Record(ok) when allowed
		ok     bool
		allow  bool
		state  BreakerState
		prober bool // a second Allow before Record
	}
	steps := []step{
		{t: 0, call: true, ok: false, allow: true, state: BreakerClosed},
		{t: 1, call: true, ok: true, allow: true, state: BreakerClosed}, // success resets the count
		{t: 2, call: true, ok: false, allow: true, state: BreakerClosed},
		{t: 3, call: true, ok: false, allow: true, state: BreakerClosed},
		{t: 4, call: true, ok: false, allow: true, state: BreakerOpen}, // third consecutive failure
		{t: 500, call: true, allow: false, state: BreakerOpen},
		{t: 1003, call: true, allow: false, state: BreakerOpen},
		{t: 1004, call: true, ok: false, allow: true, state: BreakerOpen, prober: true}, // failed probe
		{t: 1500, call: true, allow: false, state: BreakerOpen},
		{t: 2004, call: true, ok: true, allow: true, state: BreakerClosed, prober: true}, // probe succeeds
		{t: 2005, call: true, ok: true, allow: true, state: BreakerClosed},
	}
	for i, s := range steps {
		now = s.t
		tk, got := b.Allow()
		if got != s.allow {
			t.Fatalf("step %d: Allow: got %v, want %v", i, got, s.allow)
		}
		if s.prober {
			if got, want := b.State(), BreakerHalfOpen; got != want {
				t.Errorf("step %d: state during probe: got %v, want %v", i, got, want)
			}
			if _, second := b.Allow(); second {
				t.Errorf("step %d: second Allow during probe: got true, want false", i)
			}
		}
		if got {
			b.Record(tk, s.ok)
		}
		if got, want := b.State(), s.state; got != want {
			t.Errorf("step %d: state: got %v, want %v", i, got, want)
		}
	}
	want := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes: got %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Errorf("change %d: got %s, want %s", i, changes[i], want[i])
		}
	}
}

// TestBreakerRelease: a probe released without an outcome leaves the breaker half-open, and the
// next call probes; released calls do not count as failures while it is closed.
func TestBreakerRelease(t *testing.T) {
	var now int64
	b := newBreaker(2, 1000, engine.ClockFunc(func() int64 { return now }), nil)
	for range 5 {
		tk, ok := b.Allow()
		if !ok {
			t.Fatal("closed: Allow refused")
		}
		b.Release(tk)
	}
	if got := b.State(); got != BreakerClosed {
		t.Fatalf("after released calls: got %v, want closed", got)
	}
	for range 2 {
		tk, _ := b.Allow()
		b.Record(tk, false)
	}
	now = 1000
	probe, ok := b.Allow()
	if !ok {
		t.Fatal("after the cool-down: Allow refused the probe")
	}
	if _, ok := b.Allow(); ok {
		t.Fatal("half-open: a second call allowed beside the probe")
	}
	b.Release(probe)
	if got := b.State(); got != BreakerHalfOpen {
		t.Fatalf("probe released: got %v, want half_open", got)
	}
	probe, ok = b.Allow()
	if !ok {
		t.Fatal("probe released: the next call may not probe")
	}
	b.Record(probe, true)
	if got := b.State(); got != BreakerClosed {
		t.Errorf("second probe succeeded: got %v, want closed", got)
	}
}

// TestBreakerStaleOutcomes: a call begun while the breaker was closed that ends while it is
// half-open is no probe: its success does not close the breaker, its failure does not open it
// again, and the probe's own outcome decides.
func TestBreakerStaleOutcomes(t *testing.T) {
	var now int64
	b := newBreaker(1, 1000, engine.ClockFunc(func() int64 { return now }), nil)
	early, _ := b.Allow() // begun while closed, still in flight
	failing, _ := b.Allow()
	b.Record(failing, false) // opens it
	now = 1000
	probe, ok := b.Allow()
	if !ok || b.State() != BreakerHalfOpen {
		t.Fatalf("after the cool-down: allowed %v, state %v; want a probe, half-open", ok, b.State())
	}
	b.Record(early, true)
	if got := b.State(); got != BreakerHalfOpen {
		t.Fatalf("a success begun while closed: got %v, want still half_open", got)
	}
	b.Record(early, false)
	if got := b.State(); got != BreakerHalfOpen {
		t.Fatalf("a failure begun while closed: got %v, want still half_open", got)
	}
	b.Record(probe, true)
	if got := b.State(); got != BreakerClosed {
		t.Errorf("the probe succeeded: got %v, want closed", got)
	}
}
