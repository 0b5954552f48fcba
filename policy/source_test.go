package policy

import (
	"fmt"
	"testing"
	"unsafe"
)

func TestSourceEntry(t *testing.T) {
	identity := &Source{Key: "client", Kind: SourceIdentity, Mask: MaskSubnet, Waterfall: []IdentityStep{
		{Tier: TierJWTSubject, Claim: "sub"},
		{Tier: TierAPIKey, Header: "x-api-key"},
		{Tier: TierTLSFingerprint, Header: "x-ja4"},
		{Tier: TierSubnet},
	}}
	tests := []struct {
		src  *Source
		req  Request
		want string
		ok   bool
	}{
		{&Source{Kind: SourceHeader, Header: "x-tenant-id"}, Request{Headers: map[string]string{"x-tenant-id": "shopify"}}, "shopify", true},
		{&Source{Kind: SourceHeader, Header: "x-tenant-id"}, Request{}, "", false},
		{&Source{Kind: SourceHeader, Header: ":path"}, Request{Path: "/v1/orders?x=1"}, "/v1/orders?x=1", true},
		// Envoy's header map looks "host" up as ":authority".
		{&Source{Kind: SourceHeader, Header: "host"}, Request{HeaderList: []Header{{Name: ":authority", Value: "api.example.com"}}}, "api.example.com", true},
		{&Source{Kind: SourceHeader, Header: "Host"}, Request{Headers: map[string]string{":authority": "api.example.com"}}, "api.example.com", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{Claims: map[string]string{"plan": "pro"}}, "pro", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{}, "", false},
		// A claim list takes precedence over the map, its last pair with a name counting.
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{ClaimList: []Claim{{Name: "plan", Value: "free"}, {Name: "sub", Value: "u"}, {Name: "plan", Value: "pro"}}}, "pro", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{Claims: map[string]string{"plan": "map"}, ClaimList: []Claim{{Name: "plan", Value: "list"}}}, "list", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{Claims: map[string]string{"plan": "map"}, ClaimList: []Claim{{Name: "sub", Value: "u"}}}, "map", true},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{ClaimList: []Claim{{Name: "plan", Value: ""}}}, "", false},
		// Envoy's metadata action reads string values only: a number or a boolean gives no entry.
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{ClaimList: []Claim{{Name: "plan", Value: "3", NotString: true}}}, "", false},
		{&Source{Kind: SourceJWTClaim, Claim: "plan"}, Request{ClaimList: []Claim{{Name: "plan", Value: "true", NotString: true}}}, "", false},
		// The jwt_subject tier's header is formatted from the value: a number gives its text.
		{identity, Request{ClaimList: []Claim{{Name: "sub", Value: "42", NotString: true}}}, "jwt_subject:42", true},
		{identity, Request{ClaimList: []Claim{{Name: "sub", Value: "u2"}}, Headers: map[string]string{"x-api-key": "k"}}, "jwt_subject:u2", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskNone}, Request{RemoteAddr: "203.0.113.77"}, "203.0.113.77", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskNone}, Request{RemoteAddr: "203.0.113.77:5555"}, "203.0.113.77", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "203.0.113.77"}, "203.0.113.0/24", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "::ffff:203.0.113.77"}, "203.0.113.0/24", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::/64", true},
		{&Source{Kind: SourceRemoteAddress, Mask: MaskSubnet}, Request{RemoteAddr: "[2001:db8:1:2::9]:443"}, "2001:db8:1:2::/64", true},
		{&Source{Kind: SourceRemoteAddress}, Request{RemoteAddr: "not an address"}, "", false},
		{&Source{Kind: SourceGenericKey, Value: "global"}, Request{}, "global", true},
		{&Source{Kind: SourcePathMatch, Value: "pay", PathPrefix: "/v1/payments/"}, Request{Path: "/v1/payments/charge"}, "pay", true},
		{&Source{Kind: SourcePathMatch, Value: "pay", PathExact: "/v1/payments"}, Request{Path: "/v1/payments/charge"}, "", false},
		// An exact path with a query string is the path: "?" must not skip the source.
		{&Source{Kind: SourcePathMatch, Value: "pay", PathExact: "/v1/payments"}, Request{Path: "/v1/payments?x=1"}, "pay", true},
		{&Source{Kind: SourcePathMatch, Value: "pay", PathExact: "/v1/payments"}, Request{Path: "/v1/payments?"}, "pay", true},
		{&Source{Kind: SourcePathMatch, Value: "pay", PathExact: "/v1/payments"}, Request{Path: "/v1/paymentsx?x=1"}, "", false},
		{identity, Request{Claims: map[string]string{"sub": "u1"}, Headers: map[string]string{"x-api-key": "k"}}, "jwt_subject:u1", true},
		{identity, Request{Headers: map[string]string{"x-api-key": "k", "x-ja4": "t13d"}}, "api_key:k", true},
		{identity, Request{Headers: map[string]string{"x-ja4": "t13d"}, RemoteAddr: "198.51.100.9"}, "tls_fingerprint:t13d", true},
		{identity, Request{RemoteAddr: "198.51.100.9"}, "subnet:198.51.100.0/24", true},
		{identity, Request{}, "", false},
	}
	for i, tt := range tests {
		tt.src.Key = "k"
		got, ok := tt.src.Entry(tt.req)
		if ok != tt.ok || (ok && got != (Entry{"k", tt.want})) {
			t.Errorf("step %d: %s source: got %+v, %v; want %q, %v", i, tt.src.Kind, got, ok, tt.want, tt.ok)
		}
	}
}

// AppendValues must give every source the value Entry gives it, sharing the address parse.
func TestAppendValues(t *testing.T) {
	sources := []*Source{
		{Key: "ip", Kind: SourceRemoteAddress, Mask: MaskNone},
		{Key: "net", Kind: SourceRemoteAddress, Mask: MaskSubnet},
		{Key: "client", Kind: SourceIdentity, Waterfall: []IdentityStep{{Tier: TierAPIKey, Header: "x-api-key"}, {Tier: TierSubnet}}},
		{Key: "tenant", Kind: SourceHeader, Header: "X-Tenant-ID"},
	}
	reqs := []Request{
		{RemoteAddr: "203.0.113.77"},
		{RemoteAddr: "203.0.113.77:5555", HeaderList: []Header{{"x-tenant-id", "a"}, {"x-tenant-id", "b"}}},
		{RemoteAddr: "[2001:db8:1:2::9]:443", Headers: map[string]string{"x-api-key": "k"}},
		{RemoteAddr: "::ffff:198.51.100.9", Headers: map[string]string{"x-tenant-id": "m"}, HeaderList: []Header{{"x-tenant-id", "l"}}},
		{RemoteAddr: "fe80::1%eth0"},
		{RemoteAddr: "not an address", HeaderList: []Header{{"x-api-key", "k2"}}},
	}
	want := [][]string{
		{"203.0.113.77", "203.0.113.0/24", "subnet:203.0.113.0/24", ""},
		{"203.0.113.77", "203.0.113.0/24", "subnet:203.0.113.0/24", "b"},
		{"2001:db8:1:2::9", "2001:db8:1:2::/64", "api_key:k", ""},
		{"198.51.100.9", "198.51.100.0/24", "subnet:198.51.100.0/24", "l"},
		{"fe80::1", "fe80::/64", "subnet:fe80::/64", ""},
		{"", "", "api_key:k2", ""},
	}
	for i, req := range reqs {
		values, oks := req.AppendValues(nil, nil, sources)
		for j, s := range sources {
			e, ok := s.Entry(req)
			if values[j] != want[i][j] || oks[j] != ok || e.Value != values[j] {
				t.Errorf("request %d, source %s: got %q, %v; Entry %q, %v; want %q", i, s.Key, values[j], oks[j], e.Value, ok, want[i][j])
			}
		}
	}
	// In an arena, all requests' values at once: each request's stay intact while later ones
	// fill the arena, past its first buffer too.
	arena := make([]byte, 0, 40)
	var all [][]string
	for _, req := range reqs {
		values, _ := req.AppendValuesIn(nil, nil, sources, &arena)
		all = append(all, values)
	}
	for i := range reqs {
		for j, s := range sources {
			if all[i][j] != want[i][j] {
				t.Errorf("request %d, source %s, in an arena: got %q, want %q", i, s.Key, all[i][j], want[i][j])
			}
		}
	}
	req := Request{RemoteAddr: "203.0.113.77", Headers: map[string]string{"x-api-key": "k"}}
	arena = make([]byte, 0, 1024)
	oks := make([]bool, 0, len(sources))
	if n := testing.AllocsPerRun(100, func() {
		arena = arena[:0]
		req.AppendValuesIn(all[0][:0], oks, sources[:3], &arena) // not the tenant: its upper-case name is lowered, a new string
	}); n != 0 {
		t.Errorf("AppendValuesIn allocates %v times", n)
	}
}

// The forms of an address read by canonicalIPv4 are those netip's parser and writer give: for
// every address text, the whole form and the subnet are the same with the fast path as without.
func TestCanonicalIPv4MatchesNetip(t *testing.T) {
	texts := []string{
		"0.0.0.0", "1.2.3.4", "10.0.0.255", "255.255.255.255", "203.0.113.77", "100.64.10.9",
		"256.1.1.1", "1.256.1.1", "01.2.3.4", "1.02.3.4", "1.2.3.04", "00.1.2.3", "1.2.3", "1.2.3.4.5",
		"1..2.3", ".1.2.3", "1.2.3.", "1.2.3.4:80", " 1.2.3.4", "1.2.3.4 ", "1.2.3.-4", "1.2.3.4a",
		"1234.1.1.1", "::ffff:1.2.3.4", "", "0.0.0.00", "9.9.9.999",
	}
	for a := 0; a < 256; a += 51 {
		texts = append(texts, fmt.Sprintf("%d.%d.%d.%d", a, 255-a, a/2, a%7))
	}
	for _, text := range texts {
		checkAddrForms(t, text)
	}
}

func FuzzCanonicalIPv4(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "255.255.255.255", "01.2.3.4", "1.2.3.4:80", "::1"} {
		f.Add(s)
	}
	f.Fuzz(checkAddrForms)
}

// checkAddrForms checks that text's whole and subnet forms are the same whether or not
// canonicalIPv4 reads it.
func checkAddrForms(t *testing.T, text string) {
	fast := addrForms{}
	slow := addrForms{parsed: true}
	slow.ip, slow.ok = parseRemoteAddr(text)
	if fast.parse(text) != slow.ok {
		t.Fatalf("%q: parsed %v, netip %v", text, fast.ok, slow.ok)
	}
	if fast.canonical && fast.ip != slow.ip {
		t.Fatalf("%q: address %v, netip %v", text, fast.ip, slow.ip)
	}
	w1, ok1 := fast.whole(text)
	w2, ok2 := slow.whole(text)
	s1, sok1 := fast.subnet(text)
	s2, sok2 := slow.subnet(text)
	if w1 != w2 || ok1 != ok2 || s1 != s2 || sok1 != sok2 || fast.tierSubnet != slow.tierSubnet {
		t.Fatalf("%q: whole %q %v, subnet %q %v (%q); netip: whole %q %v, subnet %q %v (%q)",
			text, w1, ok1, s1, sok1, fast.tierSubnet, w2, ok2, s2, sok2, slow.tierSubnet)
	}
}

// joinParts is the buffer TestJoinCopies's parts view: a package variable, so that it is not on
// the stack, where Go's concatenation would copy a lone part anyway.
var joinParts []byte

// join copies its parts into the arena, so they may view a buffer that the caller reuses, and
// without an arena it copies two or more parts.
func TestJoinCopies(t *testing.T) {
	arena := make([]byte, 0, 64)
	for _, a := range []*addrForms{{}, {arena: &arena}} {
		for _, c := range []struct{ p, q, r, want string }{
			{"subnet:", "203.0.113", ".0/24", "subnet:203.0.113.0/24"},
			{"api_key", ":", "k", "api_key:k"},
			{"whole", "", "", "whole"}, // a lone part: copied into an arena only
			{"", "middle", "", "middle"},
			{"", "", "", ""},
		} {
			joinParts = []byte(c.p + c.q + c.r)
			buf := joinParts
			view := func(from, n int) string {
				if n == 0 {
					return ""
				}
				return unsafe.String(&buf[from], n)
			}
			got := a.join(view(0, len(c.p)), view(len(c.p), len(c.q)), view(len(c.p)+len(c.q), len(c.r)))
			parts := 0
			for _, part := range []string{c.p, c.q, c.r} {
				if part != "" {
					parts++
				}
			}
			if a.arena == nil && parts == 1 {
				continue // the documented exception: the result may be the part itself
			}
			for i := range buf {
				buf[i] = '#' // the caller reuses its buffer
			}
			if got != c.want {
				t.Errorf("join(%q, %q, %q), arena %v: got %q after the parts' buffer changed, want %q",
					c.p, c.q, c.r, a.arena != nil, got, c.want)
			}
		}
	}
}
