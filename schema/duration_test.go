package schema

import "testing"

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		ms   int64
		want string
	}{
		{0, "0ms"},
		{250, "250ms"},
		{1000, "1s"},
		{1500, "1500ms"},
		{90_000, "90s"},
		{60_000, "1m"},
		{3_600_000, "1h"},
		{86_400_000, "1d"},
		{7 * 86_400_000, "7d"},
		{36 * 3_600_000, "36h"},
	}
	for _, tt := range tests {
		got := FormatDuration(tt.ms)
		if got != tt.want {
			t.Errorf("FormatDuration(%d): got %q, want %q", tt.ms, got, tt.want)
		}
		if back, err := ParseDuration(got); err != nil || back != tt.ms {
			t.Errorf("ParseDuration(%q): got %d, %v; want %d", got, back, err, tt.ms)
		}
	}
}
