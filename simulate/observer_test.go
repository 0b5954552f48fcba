package simulate

import (
	"fmt"
	"testing"

	"github.com/rlctl/rlctl/simulate/accesslog"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	denials []Denial
	users   func(string) (int, bool)
}

func (r *recorder) Deny(d Denial)                         { r.denials = append(r.denials, d) }
func (r *recorder) Finish(users func(string) (int, bool)) { r.users = users }

// The observer hears of each would-deny decision, with the record's position and the report's
// own identity, and of the users behind addresses once the replay ends; its counts agree with
// the report's.
func TestObserver(t *testing.T) {
	var recs []accesslog.Record
	for i := range 8 {
		recs = append(recs, accesslog.Record{File: "a.log", Line: int64(i + 1), TimeMs: 5_000_000 + int64(i),
			RemoteAddr: "198.51.100.23:4000",
			Headers:    []accesslog.Header{{Name: "authorization", Value: bearerFor(fmt.Sprintf("u%d", i%3))}}})
	}
	m := testModel()
	m.Domains[0].Rules[2].Stage.Name = "shadow" // per-ip: would deny, never rejects
	obs := &recorder{}
	r := replay(t, Config{Model: m, Gateways: 1, Observer: obs}, recs)
	rl := ruleOf(t, r, "per-ip")
	if got, want := int64(len(obs.denials)), rl.WouldDeny; got != want || got != 3 {
		t.Fatalf("denials observed: got %d, want %d (the report's would-deny) and 3", got, want)
	}
	for i, d := range obs.denials {
		if got, want := d.Line, int64(6+i); got != want || d.File != "a.log" {
			t.Errorf("denial %d: got %s:%d, want a.log:%d", i, d.File, got, want)
		}
		if d.Rule.Name != "per-ip" || d.Domain != "d" || d.Denied {
			t.Errorf("denial %d: got rule %s/%s denied %v, want d/per-ip not denied (shadow)", i, d.Domain, d.Rule.Name, d.Denied)
		}
		if got, want := d.Identity, rl.TopDenied[0].Value; got != want {
			t.Errorf("denial %d: identity: got %q, want the report's %q", i, got, want)
		}
		if got, want := d.Addr, "198.51.100.23"; got != want {
			t.Errorf("denial %d: addr: got %q, want %q", i, got, want)
		}
	}
	if obs.users == nil {
		t.Fatal("Finish was not called")
	}
	if n, capped := obs.users("198.51.100.23"); n != 3 || capped {
		t.Errorf("users behind 198.51.100.23: got %d (capped %v), want 3", n, capped)
	}
	if got, want := rl.TopDenied[0].Users, 3; got != want {
		t.Errorf("report's users: got %d, want %d", got, want)
	}
}
