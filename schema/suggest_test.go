package schema

import (
	"reflect"
	"testing"
)

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"limit", "limits", 1},
		{"hedaer", "header", 1}, // a swap of neighbours is one edit
		{"mxa", "max", 1},
		{"ownr", "owner", 1},
		{"kitten", "sitting", 3},
		{"", "abc", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q): got %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestNearest(t *testing.T) {
	fields := []string{"rules", "match", "limits", "stage", "failure", "store_timeout", "lease", "owner", "min", "max"}
	tests := []struct {
		s    string
		want []string
	}{
		{"limit", []string{"limits"}},
		{"Limits", []string{"limits"}},
		{"stgae", []string{"stage"}},
		{"ownr", []string{"owner"}},
		{"mxa", []string{"max"}},
		{"mix", []string{"min", "max"}}, // a tie names both
		{"timeout", nil},                // store_timeout is too far
		{"foo", nil},
		{"my-rules", nil}, // three edits from "rules": too far for eight letters
		{"limits", nil},   // the name itself is not a suggestion
	}
	for _, tt := range tests {
		if got := nearest(tt.s, fields); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("nearest(%q): got %q, want %q", tt.s, got, tt.want)
		}
	}
}
