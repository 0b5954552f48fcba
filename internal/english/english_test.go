package english

import "testing"

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{1, "rule", "1 rule"},
		{0, "rule", "0 rules"},
		{2, "rule", "2 rules"},
		{-1, "day", "-1 day"},
		{-2, "day", "-2 days"},
		{1, "mismatch", "1 mismatch"},
		{2, "mismatch", "2 mismatches"},
		{3, "bus", "3 buses"},
		{4, "box", "4 boxes"},
		{5, "flash", "5 flashes"},
		{6, "more change", "6 more changes"},
		{7, "decision", "7 decisions"},
	} {
		if got := Plural(tc.n, tc.noun); got != tc.want {
			t.Errorf("Plural(%d, %q): got %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}
