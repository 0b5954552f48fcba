package report

import (
	"strings"
	"testing"
)

// An address denied to legitimate and other callers alike is described by both facts, not
// labelled legitimate as a whole.
func TestNote(t *testing.T) {
	tests := []struct {
		id   Identity
		want string
	}{
		{Identity{}, ""},
		{Identity{Legit: true, LegitDenials: 3}, "3 denials of legitimate callers"},
		{Identity{Users: 1}, "1 user behind it"},
		{Identity{Legit: true, LegitDenials: 40, Users: 1000}, "40 denials of legitimate callers; 1000 users behind it"},
		{Identity{Users: 100, UsersCapped: true}, "100+ users behind it"},
	}
	for _, tt := range tests {
		if got := note(tt.id); got != tt.want {
			t.Errorf("note(%+v): got %q, want %q", tt.id, got, tt.want)
		}
		if got := Note(tt.id); got != tt.want {
			t.Errorf("Note(%+v): got %q, want %q", tt.id, got, tt.want)
		}
	}
}

// The window names the end's date when it differs from the start's, and spans longer than
// two days in days.
func TestWindow(t *testing.T) {
	const start = 1714564800000 // 2024-05-01T12:00:00Z
	tests := []struct {
		requests, endMs int64
		want            string
	}{
		{0, start, "-"},
		{5, start, "2024-05-01T12:00:00Z to 12:00:00Z (0s)"},
		{5, start + 90_000, "2024-05-01T12:00:00Z to 12:01:30Z (1m30s)"},
		{5, start + 13*3_600_000, "2024-05-01T12:00:00Z to 2024-05-02T01:00:00Z (13h0m0s)"},
		{5, start + 72*3_600_000, "2024-05-01T12:00:00Z to 2024-05-04T12:00:00Z (3.0 days)"},
	}
	for _, tt := range tests {
		r := &Report{Requests: tt.requests, StartMs: start, EndMs: tt.endMs}
		if got := window(r); got != tt.want {
			t.Errorf("window(%d ms): got %q, want %q", tt.endMs-start, got, tt.want)
		}
	}
}

// A chart of a log spanning days labels its ticks with dates: the time of day alone repeats.
func TestMultiDayTicks(t *testing.T) {
	r := sample(1)
	day := int64(86_400_000)
	r.EndMs = r.StartMs + 3*day
	s := &r.Rules[0].Series
	s.BucketMs = day
	s.Requests, s.WouldDeny, s.IdealDeny, s.Lease = []int64{10, 20, 30, 5}, []int64{0, 1, 2, 0}, []int64{0, 1, 2, 0}, []int64{5, 5, 5, 5}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">May 1 12:00<", ">May 4 12:00<"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML lacks the tick %q", want)
		}
	}
}
