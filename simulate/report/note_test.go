package report

import "testing"

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
	}
}
