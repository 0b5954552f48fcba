package engine

import (
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{[]string{"edge", "tenant_id", "acme"}, "rl:edge:tenant_id:acme"},
		{[]string{"edge", "a:b"}, "rl:edge:a%3Ab"},
		{[]string{"edge", "{slot}"}, "rl:edge:%7Bslot%7D"},
		{[]string{"edge", "100%"}, "rl:edge:100%25"},
		{[]string{""}, "rl:"},
		{nil, "rl:"},
	}
	for i, tt := range tests {
		if got := Key(tt.parts...); got != tt.want {
			t.Errorf("step %d: Key(%q) = %q, want %q", i, tt.parts, got, tt.want)
		}
	}
}

// FuzzKey checks that keys are injective and never contain a hash tag.
func FuzzKey(f *testing.F) {
	f.Add("a", "b:c", "d")
	f.Add("a:b", "c", "d")
	f.Add("{x}", "%3A", "")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		k := Key(a, b, c)
		if strings.ContainsAny(k, "{}") {
			t.Fatalf("Key(%q, %q, %q) = %q holds a hash tag", a, b, c, k)
		}
		// Splitting on ':' and unescaping gives the parts back.
		got := strings.Split(strings.TrimPrefix(k, KeyPrefix), ":")
		r := strings.NewReplacer("%3A", ":", "%7B", "{", "%7D", "}", "%25", "%")
		for i, want := range []string{a, b, c} {
			if len(got) != 3 || r.Replace(got[i]) != want {
				t.Fatalf("Key(%q, %q, %q) = %q does not decode", a, b, c, k)
			}
		}
	})
}

// FuzzAppendEscaped checks the word-at-a-time escaping against escaping byte by byte.
func FuzzAppendEscaped(f *testing.F) {
	f.Add("plain-value-longer-than-eight")
	f.Add("tls_fingerprint:t13d1516h2_8daaf6152771_02713d6af862")
	f.Add("%{}:%{}:\\x80\\xff%")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		var want []byte
		for i := 0; i < len(s); i++ {
			if c := s[i]; c == '%' || c == ':' || c == '{' || c == '}' {
				want = append(want, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
			} else {
				want = append(want, c)
			}
		}
		if got := appendEscaped([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("appendEscaped(%q): got %q, want %q", s, got[1:], want)
		}
	})
}
